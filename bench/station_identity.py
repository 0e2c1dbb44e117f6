"""Benchmark: what identity and baseline from the line cost a flash batch, on virtual boards (root).

Flashes N booted virtual IQ-8275 boards with --boot-check (production image: the identity comes from the
getty banner), then takes the factory baseline of all of them at once (one smoke inference each through
the fleet's benchmark playbook over SSH pinned to the keys just read), and prints the wall time of each
part and the ratio (flash + boot check + baseline) / (flash + boot check). Timings here are noisy: the
ratio in one run is what compares.
Usage: sudo python3 bench/station_identity.py [--boards 4]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout's provisioner and tests/ before an installed copy

from provisioner import context  # noqa: E402
from provisioner.contracts.release import load_release  # noqa: E402
from provisioner.fleet.benchmark import measure  # noqa: E402
from provisioner.image.release import write_release  # noqa: E402
from provisioner.manifest import load_manifest  # noqa: E402
from provisioner.sim import control, host  # noqa: E402
from provisioner.sim.bundle import make_bundle  # noqa: E402
from provisioner.sim.qdl import install_wrappers  # noqa: E402
from provisioner.sim.synthetic_models import make_litertlm  # noqa: E402
from provisioner.station.config import StationConfig  # noqa: E402
from provisioner.station.flash import FlashOptions, flash_release  # noqa: E402
from provisioner.station.records import Records  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--boards", type=int, default=4)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (virtual boards are mount namespaces)", file=sys.stderr)
        return 2
    os.environ.update(PROVISIONER_SIM_BOOT_SCALE="0", PROVISIONER_SIM_TIME_SCALE="0",
                      PROVISIONER_CONSOLE_PASSWORD="oelinux123")
    work = Path(tempfile.mkdtemp(prefix="bench-identity-"))
    root = work / "sim"
    try:
        manifest = load_manifest(ROOT / "examples" / "gemma4-e2b-iq8275.yaml")
        model = make_litertlm(work / manifest.models[0].filename)
        bundle = make_bundle(manifest, work / "bundle", model_files={manifest.models[0].name: model})
        release = write_release(manifest, bundle, work / "out", simulated=True)
        wrappers = install_wrappers(root)
        boards = control.up(args.boards, "iq-8275-evk", root=root).boards
        cfg = StationConfig(sysfs_root=root / "sysfs", qdl=str(wrappers["qdl"]), database=work / "station.db",
                            log_dir=work / "logs", consoles={b.serial: str(b.console_link) for b in boards},
                            addresses={b.serial: f"127.0.0.1:{b.reload().data['ssh']['port']}" for b in boards})
        print(f"{args.boards} virtual IQ-8275 boards, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
        with Records(cfg.database) as rec:
            t0 = time.monotonic()
            options = FlashOptions(serials=tuple(b.serial for b in boards), boot_check=True, boot_timeout_s=120)
            run = flash_release(release, cfg, context.current(), options, records=rec)
            flash_s = time.monotonic() - t0
            if not run.ok:
                print("flash failed:", [r.error for r in run.failed], file=sys.stderr)
                return 1
            keys = sum(len((r.identity or {}).get("host_keys") or []) for r in run.results)
            attempts = {r.serial: r.attempt_id for r in run.results if r.attempt_id is not None}
            conn = {"ansible_ssh_private_key_file": str(host.controller_key(root)),
                    "ansible_python_interpreter": "/run/edge-llm-sim/python3"}
            t1 = time.monotonic()
            with load_release(release, hash_files=False) as rel:
                got = measure(rec, rel, attempts, context.current(), addresses=cfg.addresses, connection=conn)
            base_s = time.monotonic() - t1
        ok = [m for m in got if m.baseline]
        print(f"flash + boot check (identity from the banner, {keys} host keys read): {flash_s:.1f} s")
        print(f"factory baseline ({len(ok)}/{len(got)} boards measured, one fleet benchmark run): {base_s:.1f} s")
        print(f"ratio with baseline / without: {(flash_s + base_s) / flash_s:.2f}")
        for m in got:
            print(f"  {m.serial}: {m.baseline or m.error}")
        return 0 if len(ok) == len(got) else 1
    finally:
        control.down(root)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
