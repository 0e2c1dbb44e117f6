"""SSH host keys must be made on the board, never shipped in an image.

A host key baked into the image is the same on every board flashed with it: any one board (or
anyone holding the image) could then impersonate all of them, and a fleet that pins keys recorded
at the factory would pin a shared secret. oe-core's openssh generates the keys on the board at
first boot instead: sshd_check_keys (oe-core 06dd66e6,
meta/recipes-connectivity/openssh/openssh/sshd_check_keys lines 60-78) creates each HostKey that
sshd_config names and that does not exist yet, run by sshdgenkeys.service which sshd.socket
wants. A rootfs that already holds a private key there skips that generation for good.

Standard library only: bitbake imports this module through ``addpylib`` (conf/layer.conf) and
``edge-llm-image`` calls :func:`baked_host_keys` as an IMAGE_PREPROCESS_COMMAND.
"""

from __future__ import annotations

import glob
import os

# oe-core openssh_10.3p1.bb: OPENSSH_HOST_KEY_DIR ?= "${sysconfdir}/ssh" and, for read-only
# rootfs images, OPENSSH_HOST_KEY_DIR_READONLY_CONFIG ?= "${localstatedir}/run/ssh"
HOST_KEY_DIRS = ("etc/ssh", "var/run/ssh", "run/ssh")
HOST_KEY_PATTERN = "ssh_host_*_key"


def baked_host_keys(rootfs: str) -> list[str]:
    """Private host key files (and their .pub) found in ``rootfs``, as absolute image paths."""
    found = []
    for d in HOST_KEY_DIRS:
        for path in sorted(glob.glob(os.path.join(rootfs, d, HOST_KEY_PATTERN + "*"))):
            if os.path.isfile(path) or os.path.islink(path):
                found.append("/" + os.path.relpath(path, rootfs))
    return found
