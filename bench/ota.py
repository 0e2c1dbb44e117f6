#!/usr/bin/env python3
"""Whole-image OTA: what a board pulls, how long a fleet takes, how fast a bad update comes back.

Two releases against the same base image: a runtime-only change (a rebuilt runtime library) and a
model-only change (new weights). The base image is the virtual board's rootfs padded with
--image-mib of unchanging files, so the "however large the image" part of the goal is measured.
The model sits under /usr in the commit, as meta-edge-llm installs it on a sota image: meta-updater
drops /opt from the commit (image_types_ostree.bbclass @ f0e1ccaf).

Prints:
  bytes     per board, `ostree pull REMOTE BRANCH@COMMIT` (what update-os runs) with the static delta and
            with --disable-static-deltas, against the full commit and the xz/gzip size of the changed files;
            goal: pulled <= 1.2x the compressed size of what changed
  fleet     wall time of `provisioner fleet update-os` on 8 and 32 virtual boards (one batch)
  rollback  time from the armed trial deployment to the board back on the previous deployment, for
            ota-bad-npu and ota-no-boot, and how many reboots that took; goal: one reboot cycle
  max-fail  serial 2, max_fail_percentage 0, the failing board in the first batch: later boards untouched

Needs root (virtual boards are mount namespaces with sshd -i per connection) and the ostree CLI.
Usage: python3 bench/ota.py [--sizes 8,32] [--image-mib 64] [--parts bytes,fleet,faults]
"""

from __future__ import annotations

import argparse  # noqa: E402
import gzip  # noqa: E402
import json  # noqa: E402
import lzma  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from provisioner.sim import ostree_board  # noqa: E402
from tests.fleet.artserver import ArtifactServer  # noqa: E402
from tests.fleet.simfleet import BoardSpec, build_fleet, can_run  # noqa: E402
from tests.ota import otafleet as of  # noqa: E402

RUNTIME = "usr/lib/edge-llm/liblitert_lm_runtime.so"
MODEL = "usr/share/edge-llm/models/gemma-4-e2b/gemma-4-E2B-it_qualcomm_qcs8275.litertlm"
GOAL_RATIO = 1.2


def blob(rng: random.Random, size: int) -> bytes:
    """Half incompressible, half structured (like code and quantised weights, not zeros)."""
    out = bytearray()
    while len(out) < size:
        out += rng.randbytes(2048)
        out += bytes(rng.choice(b"\x00\x01\x02\x03\x7f\xff") for _ in range(256)) * 8
    return bytes(out[:size])


def compressed(data: bytes) -> tuple[int, int]:
    return len(lzma.compress(data, preset=6)), len(gzip.compress(data, 6))


def sh(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


def publish(release: Path, repo: Path, *more: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "provisioner", "ota", "publish", str(release), "--repo", str(repo),
                           *more], capture_output=True, text=True, timeout=600)
    if proc.returncode:
        raise SystemExit(f"ota publish failed: {proc.stdout}{proc.stderr}")


def pull_bytes(server: ArtifactServer, base_repo: Path, c1: str, c2: str, work: Path, *, delta: bool) -> int:
    """Bytes a board running ``c1`` fetches for ``c2``, with the same `ostree pull` update-os runs."""
    client = work / f"client-{c2[:8]}-{'delta' if delta else 'objects'}"
    shutil.rmtree(client, ignore_errors=True)
    sh("ostree", f"--repo={client}", "init", "--mode=bare")
    sh("ostree", f"--repo={client}", "pull-local", str(base_repo), c1)
    sh("ostree", f"--repo={client}", "remote", "add", "--no-gpg-verify", "edge-llm", server.url)
    sh("ostree", f"--repo={client}", "refs", f"--create=edge-llm:{of.BRANCH}", c1)
    mark = server.mark()
    sh("ostree", f"--repo={client}", "pull", *([] if delta else ["--disable-static-deltas"]), "edge-llm",
       f"{of.BRANCH}@{c2}")
    sent = sum(h.sent for h in server.since(mark) if "/summary" not in h.path and "/config" not in h.path)
    of.unfreeze(client)
    shutil.rmtree(client, ignore_errors=True)
    return sent


def kib(n: float) -> str:
    return f"{n / 1024:,.0f} KiB"


def bytes_part(base: Path, rootfs: Path, image_mib: int) -> dict:
    rng = random.Random(1)
    pad = {f"usr/lib/firmware/qcom/blob{i:02d}.bin": blob(rng, 1 << 20) for i in range(image_mib)}
    rt1, rt2 = blob(rng, 4 << 20), blob(rng, 4 << 20)
    m1, m2 = blob(rng, 16 << 20), blob(rng, 16 << 20)
    b1, c1 = of.build_release(base, "base-1", of.image_tree(rootfs, base, "base-1", {**pad, RUNTIME: rt1, MODEL: m1}))
    brt, crt = of.build_release(base, "runtime-2", of.image_tree(rootfs, base, "runtime-2",
                                                                 {**pad, RUNTIME: rt2, MODEL: m1}))
    bm, cm = of.build_release(base, "model-2", of.image_tree(rootfs, base, "model-2", {**pad, RUNTIME: rt1, MODEL: m2}))
    repo = base / "srv"
    publish(b1, repo)
    publish(brt, repo, "--from", c1)
    publish(bm, repo, "--from", c1)
    server = ArtifactServer(repo)
    rows = []
    try:
        for name, c2, changed in (("runtime-only", crt, rt2), ("model-only", cm, m2)):
            xz, gz = compressed(changed)
            with_delta = pull_bytes(server, repo, c1, c2, base, delta=True)
            without = pull_bytes(server, repo, c1, c2, base, delta=False)
            full = of.full_commit_size(repo, c2, base)
            rows.append((name, len(changed), xz, gz, with_delta, without, full))
    finally:
        server.close()
    print(f"\nbytes pulled per board (image {image_mib} MiB of unchanged files + runtime 4 MiB + model 16 MiB)")
    print(f"{'change':14} {'changed raw':>12} {'xz':>11} {'gzip':>11} {'delta pull':>11} {'no delta':>11} "
          f"{'full commit':>12}  delta/xz  nodelta/xz  goal <= {GOAL_RATIO}x")
    for name, raw, xz, gz, d, nd, full in rows:
        ok = "ok" if d <= GOAL_RATIO * xz else "MISSED"
        print(f"{name:14} {kib(raw):>12} {kib(xz):>11} {kib(gz):>11} {kib(d):>11} {kib(nd):>11} {kib(full):>12}  "
              f"{d / xz:8.2f}  {nd / xz:10.2f}  {ok}")
    return {"c1": c1}


def fleet_run(fleet, release: Path, url: str, report: Path, *more: str) -> tuple[float, dict, int]:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "provisioner", "fleet", "update-os", "-i", str(fleet.inventory),
                           "--release", str(release), "--repo", url, "--report", str(report), *more],
                          capture_output=True, text=True, timeout=900)
    wall = time.monotonic() - t0
    rows = {b["board"]: b for b in json.loads(report.read_text())["boards"]} if report.is_file() else {}
    return wall, rows, proc.returncode


def small_releases(base: Path, rootfs: Path) -> tuple[Path, str, Path, str, Path]:
    rel1, c1 = of.build_release(base, "base-1", of.image_tree(rootfs, base, "base-1"))
    rel2, c2 = of.build_release(base, "rt-2", of.image_tree(rootfs, base, "rt-2", {RUNTIME: b"runtime v2\n" * 4096}))
    repo = base / "srv"
    publish(rel1, repo)
    publish(rel2, repo)
    return rel1, c1, rel2, c2, repo


def watch_rollback(fleet, name: str, c1: str, stop: threading.Event, out: dict) -> None:
    """From the new deployment staged (its entry on the ESP, about to reboot) to booted on c1 again with the
    failed deployment gone (one entry left)."""
    b = fleet.boards[name]
    entries = ostree_board.esp(b) / "loader" / "entries"
    while not stop.is_set():
        now = time.monotonic()
        n = len(list(entries.glob("*.conf"))) if entries.is_dir() else 0
        if "armed" not in out and n > 1:
            out["armed"] = now
        elif "armed" in out and n == 1 and of.booted(fleet, name) == c1:
            out["back"] = now
            return
        time.sleep(0.05)


def fleet_part(work: Path, sizes: list[int]) -> None:
    print("\nfleet update-os wall time (one batch, runtime-only change, static delta)")
    for n in sizes:
        base = work / f"fleet-{n}"
        specs = [BoardSpec(f"b{i:02d}-8275", "iq-8275-evk", vars=of.SIM_VARS) for i in range(n)]
        t0 = time.monotonic()
        try:
            fleet = build_fleet(base / "sim", specs, cache=work / "cache")
        except Exception as exc:  # noqa: BLE001 - say what did not fit and go on
            print(f"  {n:3} boards: could not start them ({exc})")
            continue
        try:
            rel1, c1, rel2, c2, repo = small_releases(base, fleet.rootfs(specs[0].name))
            of.make_ota_boards(fleet, repo, c1)
            setup = time.monotonic() - t0
            server = ArtifactServer(repo)
            try:
                wall, rows, rc = fleet_run(fleet, rel2, server.url, base / "r.json", "--serial", str(n),
                                           "--max-fail-percentage", "100")
            finally:
                server.close()
            ok = sum(1 for r in rows.values() if r["verdict"] == "pass")
            per = [r.get("bytes_downloaded", 0) for r in rows.values()]
            print(f"  {n:3} boards: {wall:6.1f} s wall ({wall / n:.2f} s/board), {ok}/{n} updated, "
                  f"{kib(sum(per) / max(1, len(per)))} pulled per board, rc {rc} (setup {setup:.0f} s)")
        finally:
            fleet.stop()
            of.unfreeze(base)


def fault_part(work: Path) -> None:
    base = work / "faults"
    specs = [BoardSpec("badnpu-8275", "iq-8275-evk", faults=("ota-bad-npu",), vars=of.SIM_VARS),
             BoardSpec("noboot-8275", "iq-8275-evk", faults=("ota-no-boot",), vars=of.SIM_VARS),
             BoardSpec("mf1-noboot-8275", "iq-8275-evk", faults=("ota-no-boot",), vars=of.SIM_VARS),
             BoardSpec("mf2-good-8275", "iq-8275-evk", vars=of.SIM_VARS),
             BoardSpec("mf3-good-8275", "iq-8275-evk", vars=of.SIM_VARS),
             BoardSpec("mf4-good-8275", "iq-8275-evk", vars=of.SIM_VARS)]
    fleet = build_fleet(base / "sim", specs, cache=work / "cache")
    try:
        rel1, c1, rel2, c2, repo = small_releases(base, fleet.rootfs("mf2-good-8275"))
        of.make_ota_boards(fleet, repo, c1)
        server = ArtifactServer(repo)
        try:
            print("\nbad update -> back on the previous deployment (new ESP entry -> on c1, failed one gone)")
            for name in ("badnpu-8275", "noboot-8275"):
                before = len((fleet.boards[name].reload().data.get("ostree") or {}).get("boot_log") or [])
                out: dict = {}
                stop = threading.Event()
                t = threading.Thread(target=watch_rollback, args=(fleet, name, c1, stop, out), daemon=True)
                t.start()
                wall, rows, _ = fleet_run(fleet, rel2, server.url, base / f"r-{name}.json", "--limit", name)
                stop.set()
                t.join(5)
                log = (fleet.boards[name].reload().data.get("ostree") or {}).get("boot_log") or []
                new = log[before:]
                boots = sum(1 for e in new if e.get("came_up"))
                back = out.get("back", 0) - out.get("armed", 0) if "back" in out else float("nan")
                reason = rows.get(name, {}).get("reason", "")[:70]
                home = of.booted(fleet, name) == c1
                print(f"  {name:12} {back:6.1f} s staged->back, {boots} reboot(s) that came up "
                      f"({len(new)} boot attempt(s)), run {wall:.1f} s, on c1: {home}; {reason}")
            mf = ["mf1-noboot-8275", "mf2-good-8275", "mf3-good-8275", "mf4-good-8275"]
            _, rows, rc = fleet_run(fleet, rel2, server.url, base / "r-mf.json", "--limit", ",".join(mf),
                                    "--serial", "2", "--max-fail-percentage", "0")
            print("\nmax_fail_percentage 0, serial 2 (batch 1: mf1 fails, mf2 good; batch 2: mf3, mf4)")
            for name in mf:
                now = of.booted(fleet, name)
                verdict = rows.get(name, {}).get("verdict", "not-run")
                print(f"  {name:16} booted {now[:12]} ({'new' if now == c2 else 'old'}), "
                      f"deployments {len(of.deployments(fleet, name))}, verdict {verdict}")
            untouched = all(of.deployments(fleet, n) == [c1] for n in mf[2:])
            print(f"  later batch untouched: {untouched} (rc {rc})")
        finally:
            server.close()
    finally:
        fleet.stop()
        of.unfreeze(base)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="8,32", help="fleet sizes (comma-separated)")
    ap.add_argument("--image-mib", type=int, default=64, help="unchanged image content, MiB")
    ap.add_argument("--parts", default="bytes,fleet,faults", help="which parts to run (bytes needs no boards)")
    args = ap.parse_args()
    if shutil.which("ostree") is None:
        print("needs the ostree CLI", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="bench-ota-"))
    try:
        cache = work / "cache"
        cache.mkdir()
        from tests.fleet.simfleet import rootfs_tree

        parts = set(args.parts.split(","))
        if "bytes" in parts:
            bytes_part(work / "bytes", rootfs_tree(cache, "iq-8275-evk"), args.image_mib)
        if parts & {"fleet", "faults"} and can_run():
            print(f"virtual boards cannot run here: {can_run()}")
            return 0
        if "fleet" in parts:
            fleet_part(work, [int(s) for s in args.sizes.split(",") if s])
        if "faults" in parts:
            fault_part(work)
    finally:
        of.unfreeze(work)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
