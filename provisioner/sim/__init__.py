"""Virtual EVKs: everything simulated lives here and only here.

Boards (``board``), their EDL USB presence (``sysfs``), the qdl device side (``qdl``), serial
consoles and boot sequences (``console``, ``supervisor``), synthetic qcomflash bundles (``bundle``),
the network side (``host`` starts and stops each board's mount namespace, ``namespace`` builds its
mounts, ``accounts`` merges its passwd/group, ``board_state`` writes its facts and fault state,
``sshd``, ``ports``, ``systemctl``), NPU runtime stand-ins (``runtime``, ``npu``, ``cstandins`` with
the C stand-in libraries in ``clib/``) and OSTree boards (``ostree_board``, ``ostree_image``).
Production code never imports this package; it is configured with the paths the sim provides.
"""
