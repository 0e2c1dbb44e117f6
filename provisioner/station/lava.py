"""LAVA job definitions for a release, for labs that flash and test boards with LAVA instead of a station.

One job per board type of the release: ``deploy: to: qdl`` (download the qcomflash tarball), ``boot:
method: qdl`` (flash it with qdl over EDL), ``boot: method: minimal`` (wait for the console's login
prompt), and an interactive test that reads the getty banner the layer prints (``edge-llm release
<BUILD_ID>`` and the board's identity lines), which works on production images where root cannot
log in. The job follows LAVA's own documentation and schemas at Linaro/lava d27bcfdb (2026-08-21):

- doc/content/technical-references/job-definition/actions/deploy/to-qdl.md and
  lava_common/schemas/deploy/qdl.py: ``to: qdl`` with ``qcomflash: {url: ...}`` (a compressed
  tarball; the ``rootfs_image``/``overlay`` options are for LAVA's own test overlay, not used here);
- doc/.../actions/boot/method-qdl.md and lava_common/schemas/boot/qdl.py: ``firehose_program``,
  ``rawprogram`` and ``patch`` (whitespace-separated file names relative to ``path``), ``path``
  (the folder inside the tarball), ``storage`` (``ufs``);
- etc/dispatcher-config/device-types/monaco-evk.jinja2 and lemans-evk.jinja2: the device types of
  these boards (``<SoC codename>-evk``, both extending base-qdl.jinja2);
- lava_common/schemas/boot/minimal.py and test/interactive.py for the last two actions;
  tests/lava_dispatcher/sample_jobs/qdl-boot.yaml is LAVA's own job of this shape.

The flash files come from the station's preflight of the release (the same programmer, rawprogram
and patch files ``station flash`` gives qdl), so a LAVA lab flashes exactly what a station would.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from provisioner.contracts import board as on_board
from provisioner.contracts import inventory
from provisioner.errors import StationError
from provisioner.station.bundle import Preflight, preflight

JOB_TIMEOUT_MIN = 90
DEPLOY_TIMEOUT_MIN = 40        # downloading a multi-GB qcomflash tarball on a lab network
FLASH_TIMEOUT_MIN = 30         # qdl over USB: ~1 GB/min on a healthy hub, models included
BOOT_TIMEOUT_MIN = 10
TEST_TIMEOUT_MIN = 3


def device_type(board_codename: str) -> str:
    """LAVA's device type of an EVK: ``<codename>-evk`` (monaco-evk, lemans-evk in LAVA's device-types)."""
    return f"{board_codename}-evk"


def tarball_name(pf: Preflight) -> str:
    """File name of the release's qcomflash tarball (``<image>-<machine>.qcomflash.tar.gz``).

    meta-qcom classes-recipe/image_types_qcom.bbclass create_qcomflash_pkg (read at 040dc83b): the tarball
    is ``${IMAGE_NAME}.qcomflash.tar.gz`` with the link ``${IMAGE_LINK_NAME}.qcomflash.tar.gz``, and tar's
    ``--transform`` puts every file under ``${IMAGE_BASENAME}-${MACHINE}/``, the bundle folder the release
    unpacks and the job's ``path``.
    """
    name = pf.bundle_dir.name
    return name if name.endswith(".tar.gz") else f"{name.removesuffix('.qcomflash')}.qcomflash.tar.gz"


def job(pf: Preflight, url: str, *, priority: str = "medium", visibility: str = "public") -> dict[str, Any]:
    """The LAVA job (as data) that flashes ``pf``'s release from ``url`` and checks the board booted it."""
    if pf.programmer is None:
        raise StationError(f"{pf.bundle_dir}: no firehose programmer", "rebuild the bundle")
    bundle = pf.bundle_dir

    def rel(paths: list[Path]) -> str:
        return " ".join(p.relative_to(bundle).as_posix() for p in paths)

    release = pf.release_id
    return {
        "device_type": device_type(pf.board.codename),
        "job_name": f"edge-llm {release} on {pf.board.id}",
        "priority": priority,
        "visibility": visibility,
        "timeouts": {"job": {"minutes": JOB_TIMEOUT_MIN}, "action": {"minutes": BOOT_TIMEOUT_MIN},
                     "connection": {"minutes": 2}},
        "actions": [
            {"deploy": {"to": "qdl", "qcomflash": {"url": url}, "timeout": {"minutes": DEPLOY_TIMEOUT_MIN}}},
            {"boot": {"method": "qdl", "firehose_program": pf.programmer.relative_to(bundle).as_posix(),
                      "rawprogram": rel(pf.rawprograms), "patch": rel(pf.patches), "path": bundle.name,
                      "storage": pf.board.storage_type, "timeout": {"minutes": FLASH_TIMEOUT_MIN}}},
            {"boot": {"method": "minimal", "prompts": ["login:"], "timeout": {"minutes": BOOT_TIMEOUT_MIN}}},
            {"test": {"timeout": {"minutes": TEST_TIMEOUT_MIN}, "interactive": [{
                "name": "edge-llm-banner",
                "prompts": ["login:"],
                "script": [
                    # an empty line makes agetty print its issue text (with the banner) again
                    {"name": "release", "command": "",
                     "successes": [{"message": f"{on_board.BANNER_RELEASE_PREFIX}{release}"}]},
                    {"name": "identity", "command": "",
                     "successes": [{"message": f"{on_board.BANNER_IDENTITY_PREFIX}hostkey"}]},
                ]}]}},
        ],
    }


def export(release: Path | str, url_base: str, out_dir: Path | str) -> list[Path]:
    """Write one job file per board type of ``release`` into ``out_dir``; returns their paths.

    ``url_base`` is where the lab's LAVA workers download the release's qcomflash tarball from
    (``<url_base>/<release>/<tarball>``).
    """
    if "://" not in url_base:
        raise StationError(f"--url-base {url_base!r} is not a URL", "e.g. https://artifacts.lab/edge-llm")
    pf = preflight(release, hash_files=False)
    try:
        pf.raise_for_problems()
        url = f"{url_base.rstrip('/')}/{pf.release_id}/{tarball_name(pf)}"
        data = job(pf, url)
        out = Path(out_dir)
        path = out / f"{pf.release_id}-{data['device_type']}.yaml"
        text = ("# LAVA job generated by `provisioner station export-lava` (deploy to: qdl, boot qdl + minimal, "
                "banner test)\n" + yaml.safe_dump(data, sort_keys=False, default_flow_style=False))
        try:
            out.mkdir(parents=True, exist_ok=True)
            inventory.atomic_write(path, text)
        except OSError as exc:
            raise StationError(f"--out {out_dir} is not a writable folder ({exc.strerror})",
                               "pass a folder for the job files, e.g. --out lava") from None
    finally:
        pf.release.close()
    return [path]
