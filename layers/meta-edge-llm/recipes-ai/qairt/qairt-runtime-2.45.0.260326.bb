# QAIRT 2.45.0.260326: the build of the Nemotron Nano 8B Genie bundle (tool-versions 2.45.0.260326154327).
require qairt-runtime.inc
