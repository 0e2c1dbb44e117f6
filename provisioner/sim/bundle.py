"""Synthetic qcomflash bundle: what ``image_types_qcom`` would write for a manifest, minus Yocto.

The station, the qdl stand-in and rehearsals need a bundle with the real *shape* of a QLI 2.0
flash package (``<image>-<machine>/`` with rawprogram0-5.xml / patch0-5.xml carrying every
attribute qdl reads, GPT images whose backup copy sits at ``NUM_DISK_SECTORS-5.``, DISK patches,
contents.xml naming the chip, a firehose programmer, boot firmware and an ext4 ``rootfs.img``)
and with the *content* a meta-edge-llm image installs, at the paths of
:mod:`provisioner.contracts.board`. Everything is small (a few MB) so flashing a virtual board is fast.

The rootfs is a real ext4 file system made with ``mkfs.ext4 -d``; booting a virtual board
extracts it with ``debugfs -R "rdump / <dir>"``, so what the fleet later verifies over SSH is
exactly what this module put into the image.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import tempfile
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from provisioner import catalog, shipped
from provisioner.contracts import board as on_board
from provisioner.contracts import memlock
from provisioner.errors import SimError

DEFAULT_IMAGE = "edge-llm-image"
GPT_ENTRIES = 128
GPT_ENTRY_SIZE = 128
NOMINAL_DISK_SECTORS = 16384        # what the host-side GPT images assume; DISK patches fix it on the device
QLI_KERNEL = "6.18.0-qli"
TYPE_EFI = "C12A7328-F81F-11D2-BA4B-00A0C93EC93B"
TYPE_LINUX = "0FC63DAF-8483-4772-8E79-3D69D8477DE4"
TYPE_DATA = "EBD0A0A2-B9E5-4433-87C0-68B6B72699C7"
CMDLINE_FILE = "/etc/kernel/cmdline"   # what the sim shows as /proc/cmdline (the UKI's embedded cmdline)


@dataclass(frozen=True)
class Part:
    """One partition of the synthetic layout (sizes in sectors)."""

    label: str
    filename: str
    sectors: int
    type_guid: str = TYPE_DATA


# ---------------------------------------------------------------------------------------------- small files
def fake_elf(tag: str, size: int = 4096) -> bytes:
    """An ELF64 aarch64 header followed by a marker; enough for anything that checks the magic."""
    header = b"\x7fELF" + bytes([2, 1, 1, 0]) + b"\0" * 8 + struct.pack("<HHI", 2, 183, 1)
    body = header + f"\nprovisioner-sim {tag}\n".encode()
    return body.ljust(size, b"\0")


def _blob(tag: str, size: int) -> bytes:
    seed = hashlib.sha256(tag.encode()).digest()
    return (f"provisioner-sim {tag}\n".encode() + seed * (size // 32 + 1))[:size]


# ---------------------------------------------------------------------------------------------- GPT
def _guid_bytes(text: str) -> bytes:
    return uuid.UUID(text).bytes_le


def gpt_images(parts: list[tuple[Part, int]], sector_size: int, disk_guid: str,
               disk_sectors: int = NOMINAL_DISK_SECTORS) -> tuple[bytes, bytes]:
    """Primary (MBR + header + entries) and backup (entries + header) GPT images for one LUN.

    ``parts`` pairs each partition with its start sector. The images are computed for a disk of
    ``disk_sectors``; the DISK patches in patchN.xml rewrite the size-dependent header fields
    (and CRCs) on the device, which is exactly how real qcomflash bundles handle unknown UFS sizes.
    """
    entries_bytes = GPT_ENTRIES * GPT_ENTRY_SIZE
    entry_sectors = entries_bytes // sector_size
    entries = bytearray(entries_bytes)
    for i, (p, start) in enumerate(parts):
        name = p.label.encode("utf-16-le")[:72]
        uniq = uuid.uuid5(uuid.UUID(disk_guid), p.label)
        struct.pack_into("<16s16sQQQ72s", entries, i * GPT_ENTRY_SIZE, _guid_bytes(p.type_guid), uniq.bytes_le,
                         start, start + p.sectors - 1, 0, name)
    entries_crc = zlib.crc32(entries) & 0xFFFFFFFF
    first_usable = 2 + entry_sectors
    last_usable = disk_sectors - 2 - entry_sectors

    def header(my_lba: int, alt_lba: int, entries_lba: int) -> bytes:
        h = bytearray(struct.pack("<8sIIIIQQQQ16sQIII", b"EFI PART", 0x00010000, 92, 0, 0, my_lba, alt_lba,
                                  first_usable, last_usable, _guid_bytes(disk_guid), entries_lba, GPT_ENTRIES,
                                  GPT_ENTRY_SIZE, entries_crc))
        struct.pack_into("<I", h, 16, zlib.crc32(h) & 0xFFFFFFFF)
        return bytes(h).ljust(sector_size, b"\0")

    mbr = bytearray(sector_size)
    struct.pack_into("<B3sB3sII", mbr, 446, 0, b"\0\x02\0", 0xEE, b"\xff\xff\xff", 1, 0xFFFFFFFF)
    mbr[510:512] = b"\x55\xaa"
    primary = bytes(mbr) + header(1, disk_sectors - 1, 2) + bytes(entries)
    backup = bytes(entries) + header(disk_sectors - 1, 1, disk_sectors - 1 - entry_sectors)
    return primary, backup


def _gpt_patches(lun: int, sector_size: int) -> list[dict[str, str]]:
    """DISK patches that fix the size-dependent GPT fields on the device (as ptool emits them)."""
    es = GPT_ENTRIES * GPT_ENTRY_SIZE // sector_size
    bk_hdr = "NUM_DISK_SECTORS-1."
    bk_ent = f"NUM_DISK_SECTORS-{es + 1}."
    last = f"NUM_DISK_SECTORS-{es + 2}."
    crc_entries = f"CRC32({2},{GPT_ENTRIES * GPT_ENTRY_SIZE})"
    rows = [
        ("1", "32", "8", bk_hdr, "Update Primary Header with BackupGPT Header Location."),
        ("1", "48", "8", last, "Update Primary Header with LastUseableLBA."),
        ("1", "88", "4", crc_entries, "Update Primary Header with CRC of Partition Array."),
        ("1", "16", "4", "0", "Zero Out Header CRC in Primary Header."),
        ("1", "16", "4", "CRC32(1,92)", "Update Primary Header with CRC of Primary Header."),
        (bk_hdr, "24", "8", bk_hdr, "Update Backup Header with CurrentLBA."),
        (bk_hdr, "48", "8", last, "Update Backup Header with LastUseableLBA."),
        (bk_hdr, "72", "8", bk_ent, "Update Backup Header with Partition Array Location."),
        (bk_hdr, "88", "4", f"CRC32({bk_ent},{GPT_ENTRIES * GPT_ENTRY_SIZE})",
         "Update Backup Header with CRC of Partition Array."),
        (bk_hdr, "16", "4", "0", "Zero Out Header CRC in Backup Header."),
        (bk_hdr, "16", "4", f"CRC32({bk_hdr},92)", "Update Backup Header with CRC of Backup Header."),
    ]
    return [{"SECTOR_SIZE_IN_BYTES": str(sector_size), "byte_offset": off, "filename": "DISK",
             "physical_partition_number": str(lun), "size_in_bytes": size, "start_sector": start,
             "value": value, "what": what} for start, off, size, value, what in rows]


def _xml_attrs(attrs: dict[str, str]) -> str:
    from xml.sax.saxutils import quoteattr
    return " ".join(f"{k}={quoteattr(v)}" for k, v in attrs.items())


def _program(sector_size: int, lun: int, label: str, filename: str, sectors: int, start: str) -> dict[str, str]:
    start_byte = "0x0" if not start.isdigit() else hex(int(start) * sector_size)
    return {"SECTOR_SIZE_IN_BYTES": str(sector_size), "file_sector_offset": "0", "filename": filename,
            "label": label, "num_partition_sectors": str(sectors), "partofsingleimage": "false",
            "physical_partition_number": str(lun), "readbackverify": "false",
            "size_in_KB": f"{sectors * sector_size / 1024:.1f}", "sparse": "false",
            "start_byte_hex": start_byte, "start_sector": start}


def _sha256(path: Path) -> str:
    """Our own hash of a model file: the fleet's verify hashes it with production code, which must not
    agree with the simulator by construction."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------- rootfs
def _runtime_script(name: str) -> str:
    """Text of a runtime stand-in executable (from ``provisioner.sim.runtime``)."""
    from provisioner.sim import runtime

    if name in runtime.RUNTIMES:
        return runtime.runtime_executable(name)
    return ("#!/bin/sh\n"
            f"# {name}: placeholder (provisioner.sim); the real program comes from the meta-edge-llm layer.\n"
            f"echo '{name}: simulated placeholder' >&2\nexit 1\n")


def _serve_files(user: str) -> tuple[str, bytes]:
    """(unit text, program bytes) of edge-llm-serve for the virtual image.

    The unit is the layer's ``recipes-ai/edge-llm-serve/files`` one (what bitbake packages), with the
    substitutions its do_install makes (:func:`provisioner.contracts.board.serve_unit_text`): the virtual
    image ships the image's unit, not the fleet's writer of it. The program is the layer's package as the
    one file ``fleet launch`` pushes (:func:`provisioner.shipped.serve_program`): a virtual board's
    ``/usr/lib`` carries single files only, not the package directory the recipe puts in site-packages.
    """
    return on_board.serve_unit_text(user), shipped.serve_program()


def _stub_lib(name: str, qairt: str) -> bytes:
    from provisioner.sim import runtime

    return runtime.stub_library(name, qairt)


def _c_libraries() -> tuple[str, ...]:
    from provisioner.sim import cstandins

    return tuple(cstandins.LIBRARIES)


def _c_library(name: str, qairt: str) -> bytes:
    """A stand-in shared library exporting the runtime's C API (compiled once, cached)."""
    from provisioner.sim import cstandins

    return cstandins.library_bytes(name, qairt)


def _write(root: Path, path: str, text: str | bytes, mode: int = 0o644) -> Path:
    p = root / path.lstrip("/")
    p.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, str):
        p.write_text(text, encoding="utf-8")
    else:
        p.write_bytes(text)
    p.chmod(mode)
    return p



# ---------------------------------------------------------------------------------------------- os-release
# The simulated meta-qcom checkout: the local_conf_header entry of its ci/base.yml (qualcomm-linux/meta-qcom
# @ ef0004df) that decides /etc/os-release - the only place BUILD_ID joins OS_RELEASE_FIELDS.
# tests/sim/test_bundle.py checks it against the real file.
META_QCOM_LOCAL_CONF = {"os-release": 'OS_RELEASE_FIELDS:append = " BUILD_ID"\nBUILD_ID ?= "local-${DATETIME}"\n'}
# openembedded-core @ 06dd66e6 meta/recipes-core/os-release/os-release.bb: its own field list (no BUILD_ID;
# the recipe assigns it with '=', so only :append/:remove from local.conf survive), the unquoted fields,
# and BUILD_ID ?= "${DATETIME}". Fields without a value are skipped, like the recipe does.
OS_RELEASE_FIELDS = ("ID", "ID_LIKE", "NAME", "VERSION", "VERSION_ID", "VERSION_CODENAME", "PRETTY_NAME",
                     "CPE_NAME")
OS_RELEASE_UNQUOTED = ("ID", "VERSION_ID", "VARIANT_ID")
DISTRO_VALUES = {"ID": "qcom-distro", "NAME": "Qualcomm Linux", "VERSION": "2.0 (wrynose)", "VERSION_ID": "2.0",
                 "PRETTY_NAME": "Qualcomm Linux 2.0", "CPE_NAME": "cpe:/o:openembedded:qcom-distro:2.0"}
SIM_DATETIME = "20260101000000"     # what ${DATETIME} expands to on a virtual build (fixed: reproducible)
_ASSIGN = re.compile(r'^(OS_RELEASE_FIELDS|BUILD_ID)(:append|:prepend|:remove)?\s*(\?\?=|\?=|\+=|\.=|=)\s*"(.*)"$')


def kas_local_conf(kas_files: list[Path] | None, release: str) -> str:
    """The local_conf_header text kas would write for ``kas_files`` (entries merged by key, sorted by key).

    A file including anything from repo meta-qcom brings in :data:`META_QCOM_LOCAL_CONF` first.
    Without kas files (callers that only want a bootable image) the configuration is assumed to be
    meta-qcom's plus ``BUILD_ID = "<release>"``.
    """
    entries: dict[str, str] = {}
    if kas_files is None:
        entries = {**META_QCOM_LOCAL_CONF, "release": f'BUILD_ID = "{release}"\n'}
    for f in kas_files or []:
        data = yaml.safe_load(Path(f).read_text(encoding="utf-8")) or {}
        includes = (data.get("header") or {}).get("includes") or []
        if any(isinstance(i, dict) and i.get("repo") == "meta-qcom" for i in includes):
            entries = {**META_QCOM_LOCAL_CONF, **entries}
        entries.update(data.get("local_conf_header") or {})
    return "".join(f"# {k}\n{entries[k]}\n" for k in sorted(entries))


def os_release_text(local_conf: str) -> str:
    """/etc/os-release as os-release.bb would write it after ``local_conf`` (two variables evaluated)."""
    fields = list(OS_RELEASE_FIELDS)
    build_id: str | None = None
    appended: list[str] = []
    removed: set[str] = set()
    for line in local_conf.splitlines():
        m = _ASSIGN.match(line.strip())
        if not m:
            continue
        var, op, assign, value = m.groups()
        if var == "OS_RELEASE_FIELDS":
            if op == ":remove":
                removed.update(value.split())
            elif op in (":append", ":prepend") or assign in ("+=", ".="):
                appended += value.split()
        elif op is None and (assign == "=" or (assign in ("?=", "??=") and build_id is None)):
            build_id = value
    fields = [f for f in fields + appended if f not in removed]
    values = {**DISTRO_VALUES, "BUILD_ID": (build_id or "${DATETIME}").replace("${DATETIME}", SIM_DATETIME)}
    out = []
    for field in fields:
        value = values.get(field)
        if value:
            out.append(f"{field}={value}" if field in OS_RELEASE_UNQUOTED else f'{field}="{value}"')
    return "\n".join(out) + "\n"


def _memlock_files(policy: str) -> dict[str, str]:
    """What edge-llm-memlock.bb installs for ``policy``: the values from the one rule (contracts.memlock)."""
    rule = memlock.limits(policy)
    value = rule.session
    return {on_board.LIMITS_FILE: "# installed by meta-edge-llm: FastRPC must pin ~1.17 GB for the model weights\n"
                                  f"*    soft    memlock    {value}\n*    hard    memlock    {value}\n"
                                  f"root soft    memlock    {value}\nroot hard    memlock    {value}\n",
            on_board.SYSTEMD_MEMLOCK_DROPIN: "# installed by meta-edge-llm: limits.conf does not apply to systemd "
                                             f"services\n[Manager]\nDefaultLimitMEMLOCK={rule.service}\n",
            on_board.SERVE_MEMLOCK_DROPIN: "# installed by meta-edge-llm: the inference service pins the model's "
                                           f"weights\n[Service]\nLimitMEMLOCK={rule.service}\n"}


def build_rootfs_tree(manifest: Any, tree: Path, model_files: dict[str, Path],
                      kas_files: list[Path] | None = None, image_name: str = DEFAULT_IMAGE) -> dict[str, Any]:
    """Populate ``tree`` with what the meta-edge-llm image installs; returns release.json data.

    ``kas_files`` are the release's rendered kas files: /etc/os-release gets what they (with the
    simulated meta-qcom) would put there, see :func:`kas_local_conf`.
    """
    board: catalog.Board = manifest.board
    image = manifest.image
    user = image.inference_user
    rel = catalog.release(manifest.qli)
    _write(tree, on_board.OS_RELEASE, os_release_text(kas_local_conf(kas_files, manifest.release)))
    _write(tree, "/etc/issue", "Qualcomm Linux 2.0 \\n \\l\n\n")
    _write(tree, on_board.ISSUE_SNIPPET, on_board.ISSUE_TEXT)
    # edge-llm-identity (the layer's script; the virtual board emulates what it writes at boot) and
    # the issue.d link to its output; no host key: the board makes its own at first boot
    _write(tree, on_board.IDENTITY_SCRIPT, on_board.identity_script_text(), 0o755)
    link = tree / on_board.IDENTITY_ISSUE.lstrip("/")
    link.parent.mkdir(parents=True, exist_ok=True)
    link.unlink(missing_ok=True)
    link.symlink_to(on_board.IDENTITY_RUN_FILE)
    # production: root's password field is '*' (no password matches; SSH keys still work)
    root_pw = "$6$qli$default" if image.root_login == "debug" else "*"
    _write(tree, "/etc/shadow", f"root:{root_pw}:19000:0:99999:7:::\n", 0o600)
    _write(tree, "/etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"
           "sshd:x:995:995::/var/run/sshd:/bin/false\n"
           f"{on_board.FASTRPC_OWNER}:x:990:990::/nonexistent:/bin/false\n"     # fastrpc's sysusers.d user
           f"{user}:x:1000:1000::/home/{user}:/bin/sh\n")
    _write(tree, "/etc/group", "root:x:0:\nvideo:x:44:\n"
           f"{on_board.FASTRPC_GROUP}:x:990:{user}\n{user}:x:1000:\n")
    (tree / "home" / user).mkdir(parents=True, exist_ok=True)
    os.chown(tree / "home" / user, 1000, 1000)     # mkfs.ext4 -d keeps owners: the image's llm owns its home
    download_mode = int(image.download_mode)
    _write(tree, CMDLINE_FILE, "root=PARTLABEL=rootfs rw rootwait console=ttyMSM0,115200n8 earlycon "
           f"pcie_pme=nomsi kernel.sched_pelt_multiplier=4 qcom_scm.download_mode={download_mode}\n")
    for path, text in _memlock_files(image.memlock).items():
        _write(tree, path, text)
    _write(tree, on_board.FASTRPC_LIB, fake_elf("libcdsprpc.so fastrpc 1.0.6", 2048), 0o755)
    _write(tree, f"/usr/lib/systemd/system/{on_board.FASTRPC_SERVICE}",
           "[Unit]\nDescription=cDSP RPC daemon\n\n[Service]\nExecStart=/usr/bin/cdsprpcd\n"
           "Restart=always\n\n[Install]\nWantedBy=multi-user.target\n")
    _write(tree, "/usr/lib/udev/rules.d/60-fastrpc.rules",
           f'KERNEL=="fastrpc-*", OWNER="{on_board.FASTRPC_OWNER}", GROUP="{on_board.FASTRPC_GROUP}", '
           f'MODE="{on_board.FASTRPC_MODE:04o}"\n')
    # The serve unit and program are the product's (the layer's edge_llm_serve package and its unit).
    unit, serve = _serve_files(user)
    _write(tree, f"{on_board.SERVE_UNIT_DIR}/{on_board.SERVE_UNIT}", unit)
    _write(tree, on_board.SERVE_BIN, serve, 0o755)
    if image.ssh_authorized_keys:
        _write(tree, "/root/.ssh/authorized_keys", "".join(k + "\n" for k in image.ssh_authorized_keys), 0o600)
    with_genie = "genie" in manifest.runtimes
    for q in manifest.qairt:
        for f in on_board.qairt_files(board, q, with_genie):
            if f.endswith("genie-t2t-run"):
                _write(tree, f, _runtime_script("genie-t2t-run"), 0o755)
            elif Path(f).name in _c_libraries():
                _write(tree, f, _c_library(Path(f).name, q), 0o755)
            else:
                _write(tree, f, _stub_lib(Path(f).name, q), 0o755)
        _write(tree, f"{on_board.qairt_bin_dir(q)}/qnn-platform-validator", _runtime_script("qnn-platform-validator"),
               0o755)
        _write(tree, f"{on_board.qairt_dir(q)}/sdk.yaml", f"qairt: {q}\n")
    if "litert_lm" in manifest.runtimes:
        base = on_board.litert_dir()
        for f in on_board.LITERT_FILES:
            if f == "bin/litert_lm_main":
                _write(tree, f"{base}/{f}", _runtime_script("litert_lm_main"), 0o755)
            elif Path(f).name in _c_libraries():
                _write(tree, f"{base}/{f}", _c_library(Path(f).name, on_board.LITERT_QAIRT), 0o755)
            else:
                _write(tree, f"{base}/{f}", _stub_lib(Path(f).name, on_board.LITERT_QAIRT), 0o755)
        _write(tree, f"{base}/BUILD_INFO", f"litert-lm {on_board.LITERT_REV}\nqairt {on_board.LITERT_QAIRT}\n"
               "patches: dispatch-lib-dir, htp-burst, qli-soc-guard\n")
    models = []
    for m in manifest.models:
        src = model_files.get(m.name) or (m.path if m.path is not None and Path(m.path).exists() else None)
        if src is None:
            raise SimError(f"no file for model '{m.name}' to put into the synthetic image",
                           "pass model_files={name: path} (see provisioner.sim.synthetic_models)")
        src = Path(src)
        sha = m.sha256 or (_sha256(src) if src.is_file() else None)
        version = on_board.model_version_id(sha, "1")
        vdir = tree / on_board.model_version_dir(m.name, version).lstrip("/")
        vdir.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, vdir, dirs_exist_ok=True)
            names = sorted(str(p.relative_to(vdir)) for p in vdir.rglob("*") if p.is_file())
        else:
            shutil.copyfile(src, vdir / src.name)   # copyfile keeps sparse files cheap on most FSs
            names = [src.name]
        # Same model.json shape the fleet's deploy role writes (provisioner.fleet.shared.deploy_index):
        # per-file name/size/sha256; a .litertlm also carries its own sha256/size/file.
        meta: dict[str, Any] = {"name": m.name, "kind": m.kind, "runtime": m.runtime, "qairt": m.qairt,
                                "version": version,
                                "files": [{"name": n, "size": (vdir / n).stat().st_size,
                                           "sha256": sha if src.is_file() else _sha256(vdir / n)} for n in names]}
        if src.is_file():
            meta.update(sha256=sha, size=src.stat().st_size, file=src.name)
        (vdir / on_board.MODEL_META).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        cur = tree / on_board.model_current(m.name).lstrip("/")
        cur.symlink_to(version)
        models.append(meta)
    # the document the image's edge_llm_release_json writes (provisioner render fills it), in the same shape,
    # so a virtual board shows what a flashed one does (tests/sim/test_bundle.py holds the shapes equal)
    release = {"format": 1, "release": manifest.release, "board": board.id, "machine": board.kas_machine,
               "qli": rel.id, "image": image_name, "qairt": list(manifest.qairt), "runtimes": list(manifest.runtimes),
               "models": [{k: meta.get(k) for k in ("name", "kind", "qairt", "version", "sha256", "size")}
                          for meta in models],
               "variant": image.variant, "download_mode": download_mode}
    _write(tree, on_board.RELEASE_JSON, json.dumps(release, indent=2, sort_keys=True) + "\n")
    return release


def make_ext4(tree: Path, out: Path, *, label: str = "rootfs", fs_uuid: str | None = None) -> Path:
    """``mkfs.ext4 -d tree`` into a file sized for the tree plus headroom (no journal: small)."""
    used = 0
    count = 0
    for p in tree.rglob("*"):
        count += 1
        if p.is_file() and not p.is_symlink():
            used += os.stat(p).st_blocks * 512
    size_kib = max(8192, int((used * 1.3) / 1024) + count * 8 + 4096)
    size_kib = (size_kib + 1023) // 1024 * 1024
    with open(out, "wb") as fh:
        fh.truncate(size_kib * 1024)
    argv = ["mkfs.ext4", "-q", "-F", "-b", "4096", "-O", "^has_journal", "-L", label, "-E", "root_owner=0:0",
            "-U", fs_uuid or str(uuid.uuid4()), "-d", str(tree), str(out)]
    env = dict(os.environ, E2FSPROGS_FAKE_TIME="1700000000")
    res = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if res.returncode != 0:
        raise SimError(f"mkfs.ext4 failed: {res.stderr.strip() or res.stdout.strip()}",
                       "install e2fsprogs (>= 1.43 for -d)")
    return out


# ---------------------------------------------------------------------------------------------- bundle
def make_bundle(manifest: Any, out_dir: Path | str, *, model_files: dict[str, Path] | None = None,
                image: str = DEFAULT_IMAGE, kas_files: list[Path] | None = None) -> Path:
    """Write ``<out_dir>/<image>-<machine>/`` for ``manifest`` and return that folder.

    ``kas_files``: the rendered kas files the release carries (see :func:`build_rootfs_tree`).

    The folder is assembled under a temporary name and renamed into place, so a half-written
    bundle never exists under the final name.
    """
    board: catalog.Board = manifest.board
    ss = board.sector_size
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    final = out_dir / f"{image}-{board.kas_machine}"
    stage = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=out_dir))
    stage.chmod(0o755)
    try:
        with tempfile.TemporaryDirectory(prefix="rootfs-tree.", dir=out_dir) as tree:
            release = build_rootfs_tree(manifest, Path(tree), {k: Path(v) for k, v in (model_files or {}).items()},
                                        kas_files, image)
            seed = uuid.uuid5(uuid.NAMESPACE_URL, f"edge-llm/{manifest.release}/{board.id}")
            make_ext4(Path(tree), stage / "rootfs.img", fs_uuid=str(seed))
        files = {
            "prog_firehose_ddr.elf": fake_elf(f"firehose {board.soc_family} ddr", 16384),
            "efi.bin": _blob(f"efi {board.kas_machine} {release['release']}", 64 * 1024),
            "dtb.bin": _blob(f"dtb {board.dt_compatible[0]}", 16 * 1024),
            "xbl.elf": fake_elf(f"xbl {board.soc_family}", 32 * 1024),
            "xbl_config.elf": fake_elf(f"xbl_config {board.soc_family}", 8 * 1024),
            "cdt.bin": _blob(f"cdt {board.id}", 4096),
            "uefi.elf": fake_elf("uefi", 32 * 1024),
            "tz.mbn": fake_elf("tz", 16 * 1024),
            "hypvm.mbn": fake_elf("hyp", 8 * 1024),
            "aop.mbn": fake_elf("aop", 8 * 1024),
        }
        for name, data in files.items():
            (stage / name).write_bytes(data)
        rootfs_sectors = -(-(stage / "rootfs.img").stat().st_size // ss)
        rootfs_sectors = -(-rootfs_sectors * 5 // 4)             # headroom like a real partitions.conf
        layouts: dict[int, list[Part]] = {
            0: [Part("efi", "efi.bin", 4096, TYPE_EFI), Part("rootfs", "rootfs.img", rootfs_sectors, TYPE_LINUX)],
            1: [Part("xbl_a", "xbl.elf", 256), Part("xbl_config_a", "xbl_config.elf", 64)],
            2: [Part("xbl_b", "xbl.elf", 256), Part("xbl_config_b", "xbl_config.elf", 64)],
            3: [Part("cdt", "cdt.bin", 32), Part("ddr", "", 256)],
            4: [Part(f"{n}_{ab}", f, s) for ab in "ab" for n, f, s in
                (("uefi", "uefi.elf", 1280), ("tz", "tz.mbn", 1024), ("hyp", "hypvm.mbn", 1024),
                 ("aop", "aop.mbn", 128), ("dtb", "dtb.bin", 1024))],
            5: [Part("persist", "", 8192)],
        }
        entry_sectors = GPT_ENTRIES * GPT_ENTRY_SIZE // ss
        for lun, parts in layouts.items():
            placed = []
            start = 2 + entry_sectors
            for p in parts:
                placed.append((p, start))
                start += p.sectors
            disk_guid = str(uuid.uuid5(seed, f"lun{lun}"))
            primary, backup = gpt_images(placed, ss, disk_guid)
            (stage / f"gpt_main{lun}.bin").write_bytes(primary)
            (stage / f"gpt_backup{lun}.bin").write_bytes(backup)
            (stage / f"gpt_both{lun}.bin").write_bytes(primary + backup)
            programs = [_program(ss, lun, p.label, p.filename, p.sectors, str(s)) for p, s in placed]
            programs.append(_program(ss, lun, "PrimaryGPT", f"gpt_main{lun}.bin", 2 + entry_sectors, "0"))
            programs.append(_program(ss, lun, "BackupGPT", f"gpt_backup{lun}.bin", 1 + entry_sectors,
                                     f"NUM_DISK_SECTORS-{1 + entry_sectors}."))
            lines = ['<?xml version="1.0" ?>', "<data>",
                     "  <!--NOTE: This is an ** Autogenerated file ** (provisioner.sim synthetic bundle)-->"]
            lines += [f"  <program {_xml_attrs(a)}/>" for a in programs]
            lines.append("</data>")
            (stage / f"rawprogram{lun}.xml").write_text("\n".join(lines) + "\n", encoding="utf-8")
            host_side = [dict(a, filename=f"gpt_main{lun}.bin", start_sector=a["start_sector"].replace(
                "NUM_DISK_SECTORS", str(NOMINAL_DISK_SECTORS))) for a in _gpt_patches(lun, ss)[:1]]
            patches = host_side + _gpt_patches(lun, ss)
            lines = ['<?xml version="1.0" ?>', "<patches>"]
            lines += [f"  <patch {_xml_attrs(a)}/>" for a in patches]
            lines.append("</patches>")
            (stage / f"patch{lun}.xml").write_text("\n".join(lines) + "\n", encoding="utf-8")
        (stage / "contents.xml").write_text(_contents_xml(board, image, release["release"]), encoding="utf-8")
        if final.exists():
            shutil.rmtree(final)
        os.replace(stage, final)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return final


def _contents_xml(board: catalog.Board, image: str, release_id: str) -> str:
    chip = board.contents_chip_ids[0]
    return f"""<?xml version="1.0" ?>
<contents>
  <product_flavors cmm_pf_var="PRODUCT_FLAVORS"><pf><name>{board.storage_type}</name></pf></product_flavors>
  <product_info>
    <product_name>{chip}.LE.2.0</product_name>
    <hlos_type cmm_var="HLOS_TYPE">LE</hlos_type>
    <chipid cmm_var="CHIPID">{chip}</chipid>
    <machine>{board.kas_machine}</machine>
    <image>{image}</image>
    <build_id>{release_id}</build_id>
  </product_info>
  <builds_flat>
    <build>
      <name>common</name>
      <role>common</role>
      <chipset>{board.soc_family}</chipset>
      <storage_type>{board.storage_type}</storage_type>
      <download_file minimized="true"><file_name>prog_firehose_ddr.elf</file_name><file_path>.</file_path>
      </download_file>
      <download_file><file_name>rawprogram0.xml</file_name><file_path>.</file_path></download_file>
      <download_file><file_name>patch0.xml</file_name><file_path>.</file_path></download_file>
    </build>
  </builds_flat>
</contents>
"""


def qdl_argv(bundle: Path, qdl: str = "qdl", *, serial: str | None = None) -> list[str]:
    """The qdl command line that flashes ``bundle`` (all six LUNs), as a station runs it."""
    argv = [qdl, "--storage", "ufs"]
    if serial:
        argv += ["--serial", serial]
    argv.append(str(bundle / "prog_firehose_ddr.elf"))
    argv += [str(bundle / f"rawprogram{n}.xml") for n in range(6)]
    argv += [str(bundle / f"patch{n}.xml") for n in range(6)]
    return argv
