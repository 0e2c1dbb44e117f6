"""Virtual EVKs: everything simulated lives here and only here.

Boards (``board``), their EDL USB presence (``sysfs``), the qdl device side (``qdl``), serial
consoles and boot sequences (``console``, ``supervisor``), synthetic qcomflash bundles (``bundle``)
and, from helper D2, the network side (``host``) and NPU runtime stand-ins (``runtime``).
Production code never imports this package; it is configured with the paths the sim provides.
"""
