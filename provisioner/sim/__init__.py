"""Virtual EVKs: everything simulated lives here and only here.

Boards (``board``), their EDL USB presence (``sysfs``), the qdl stand-in (``qdl`` its command line,
``qdl_xml`` its own flash XML reader, ``lun_images`` the firehose side writing the board's LUNs),
serial consoles and boot sequences (``console``, ``supervisor``), synthetic qcomflash bundles
(``bundle``), the network side (``host`` starts and stops each board's mount namespace,
``namespace`` builds its mounts, ``accounts`` merges its passwd/group, ``board_state`` writes its
facts and fault state, ``sshd``, ``ports``), the stand-in systemd (``systemctl`` its CLI,
``unit_files``, ``service_manager``, ``service_runner``), NPU runtime stand-ins (``runtime`` the
entry point, ``litert_main``, ``genie_run``, with ``board_view``, ``model_files`` and
``npu_outcome`` shared with ``npu``, the model behind ``cstandins``' C libraries in ``clib/``) and
OSTree boards (``ostree_board``, ``ostree_image``). ``filelock`` is the one lock helper.
Production code never imports this package; it is configured with the paths the sim provides.
"""
