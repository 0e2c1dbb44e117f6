# QAIRT 2.44.0.260225: the build Gemma-4 E2B (.litertlm) and LiteRT-LM cbf463d97fa3 use.
require qairt-runtime.inc
