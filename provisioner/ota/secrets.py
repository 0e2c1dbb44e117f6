"""Secrets a published OSTree commit must not carry, found by the shapes we know.

A published repository is static files: whoever reaches its URL can fetch every object, so a board's
API token or an SSH private key baked into the image goes to them too. Before ``ota publish`` imports a
commit it looks, by name and by content, for:

- the edge-llm API token at the path the service reads it from (``token_file`` in edge-llm-serve,
  ``contracts.board.TOKEN_FILE``), under ``/etc`` or ``/usr/etc`` (meta-updater's
  image_types_ostree.bbclass moves ``etc`` to ``usr/etc``), and the controller's copies
  (``.edge-llm-tokens/<host>``);
- SSH private keys: OpenSSH's default file names (``id_rsa``, ``id_ed25519``..., ``ssh(1)`` FILES;
  ``ssh_host_*_key``, ``sshd(8)`` FILES), and any small file holding a PEM or OpenSSH private key block
  (``-----BEGIN ... PRIVATE KEY-----``, RFC 7468 section 2 and OpenSSH's PROTOCOL.key).

Keys and tokens belong to one board: the board makes its host keys at first boot and ``fleet launch``
writes the token into the board's own ``/etc``, which ostree carries from deployment to deployment.
"""

from __future__ import annotations

import re
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from provisioner.contracts import board as on_board
from provisioner.ota import ostree

#: the service's bearer token (edge-llm-serve's default token_file)
TOKEN_FILES = (on_board.TOKEN_FILE,)
#: the folder next to the inventory where ``fleet launch`` keeps each board's token (serve_config.TOKEN_DIR_NAME)
CONTROLLER_TOKEN_DIR = ".edge-llm-tokens"
SSH_KEY_NAME = re.compile(r"^(?:id_(?:rsa|dsa|ecdsa|ecdsa_sk|ed25519|ed25519_sk|xmss)|ssh_host_(?:[a-z0-9]+_)?key)$")
PRIVATE_KEY_BLOCK = re.compile(rb"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")
#: files up to this size are read for a key block (a 16384-bit RSA key in PEM is about 12 KiB)
SCAN_BYTES = 64 * 1024


@dataclass(frozen=True)
class Secret:
    """One file of the commit that holds a secret: its path in the commit and what it is."""

    path: str
    what: str


def _token_paths() -> set[str]:
    return {p for f in TOKEN_FILES for p in (f, f"/usr{f}")}


def by_name(path: str) -> str | None:
    """What the file's path says it is, or None."""
    p = PurePosixPath(path)
    if path in _token_paths():
        return "the board's edge-llm API token"
    if CONTROLLER_TOKEN_DIR in p.parts[:-1]:
        return "a board's edge-llm API token (the controller's copy)"
    if SSH_KEY_NAME.match(p.name):
        return "an SSH private key"
    return None


def archive_content(repo: Path, checksum: str, limit: int) -> bytes | None:
    """Up to ``limit`` bytes of a file object in an archive-mode repo, or None when it cannot be read so.

    An archive repo stores a file as ``objects/XX/REST.filez``: a big-endian uint32 header size, 4 bytes of
    padding, the header, then the content as raw deflate (ostree docs "formats", the archive format;
    src/libostree/ostree-core.c ``ostree_raw_file_to_archive_z2_stream``). Reading it here costs no process
    per file; a rootfs has tens of thousands of small files.
    """
    try:
        data = (repo / "objects" / checksum[:2] / f"{checksum[2:]}.filez").read_bytes()
        (size,) = struct.unpack(">I", data[:4])
        return zlib.decompressobj(-zlib.MAX_WBITS).decompress(data[8 + size:], limit)
    except (OSError, struct.error, zlib.error):
        return None


def by_content(repo: Path, checksum: str, size: int) -> str | None:
    """'a private key' when the (small) file holds a PEM or OpenSSH private key block.

    An object that does not read as an archive file object is missing or damaged: ``pull-local
    --untrusted`` verifies every object's checksum next and refuses the commit then.
    """
    data = archive_content(repo, checksum, size) if size <= SCAN_BYTES else None
    return "a private key" if data and PRIVATE_KEY_BLOCK.search(data) else None


def find_secrets(repo: Path, commit: str, env: ostree.Env) -> list[Secret]:
    """Every regular file of ``commit`` in the archive repo ``repo`` that holds a secret we know the shape of.

    ``ostree ls -R -C`` prints ``mode uid gid size checksum path`` for a regular file (ostree-ls(1)).
    """
    found = []
    listing = ostree.run(repo, "ls", "-R", "-C", commit, what=f"ls {commit[:12]}", env=env)
    for line in listing.splitlines():
        fields = line.split(None, 5)
        if len(fields) != 6 or not fields[0].startswith("-"):
            continue
        size, checksum, path = int(fields[3]), fields[4], fields[5]
        what = by_name(path) or by_content(repo, checksum, size)
        if what:
            found.append(Secret(path, what))
    return found
