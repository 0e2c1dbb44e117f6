#!/usr/bin/env python3
"""Benchmark: `provisioner fetch` throughput vs `curl` from the same local HTTP server.

Serves a random file from 127.0.0.1 (the Range-capable test server, in its own process),
downloads it with `curl -o`, with `provisioner fetch` (CLI: also hashes every byte for the sha256
check and writes through a .part file) and with `fetch_one()` in-process, alternating in each
round so load from other processes hits all three alike. Prints per-round and median ratios;
asserts nothing. Goal: provisioner >= 0.8x curl.

    python3 bench/fetch.py [--mb 1024] [--runs 3]
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[0] = str(ROOT)

import argparse  # noqa: E402
import hashlib  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

from provisioner.artifacts.fetch import FetchItem, fetch_one  # noqa: E402

SERVER = """
import sys, time
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from tests.artifacts.rangeserver import RangeServer
with RangeServer(Path(sys.argv[2])) as s:
    print(s.port, flush=True)
    sys.stdin.read()
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    if not shutil.which("curl"):
        sys.exit("curl not found (apt-get install curl)")
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        (t / "srv").mkdir()
        name = "model_qualcomm_qcs8275.litertlm"
        h = hashlib.sha256()
        block = os.urandom(4 << 20)
        with open(t / "srv" / name, "wb") as f:
            for i in range(args.mb // 4):
                chunk = bytes([i & 0xFF]) + block[1:]
                f.write(chunk)
                h.update(chunk)
        size = (args.mb // 4) * (4 << 20)
        server = subprocess.Popen([sys.executable, "-c", SERVER, str(ROOT), str(t / "srv")],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            url = f"http://127.0.0.1:{int(server.stdout.readline())}/{name}"  # type: ignore[union-attr]
            manifest = t / "m.yaml"
            manifest.write_text(
                "release: bench\nboard: iq-8275-evk\nqairt: ['2.44.0.260225']\nmodels:\n"
                f"  - {{name: m, kind: litertlm, url: '{url}', qairt: '2.44.0.260225', "
                f"sha256: '{h.hexdigest()}', size: {size}}}\nbuild: {{dl_dir: dl}}\n")
            rounds = []
            for _ in range(args.runs):
                out = t / "curl.bin"
                start = time.perf_counter()
                subprocess.run(["curl", "-sS", "-f", "-o", str(out), url], check=True)
                c = time.perf_counter() - start
                out.unlink()
                shutil.rmtree(t / "dl", ignore_errors=True)
                start = time.perf_counter()
                subprocess.run([sys.executable, "-m", "provisioner", "fetch", str(manifest), "--models-only", "--json"],
                               check=True, capture_output=True, cwd=ROOT)
                p = time.perf_counter() - start
                shutil.rmtree(t / "dl", ignore_errors=True)
                (t / "dl").mkdir()
                start = time.perf_counter()
                fetch_one(FetchItem(name, [url], "model", "m", sha256=h.hexdigest(), size=size), t / "dl")
                lib = time.perf_counter() - start
                shutil.rmtree(t / "dl", ignore_errors=True)
                rounds.append((c, p, lib))
                mb = size / 1e6
                print(f"round: curl {mb / c:7.1f} MB/s | provisioner fetch CLI {mb / p:7.1f} MB/s ({c / p:.2f}x) | "
                      f"fetch_one() {mb / lib:7.1f} MB/s ({c / lib:.2f}x)")
        finally:
            server.kill()
        print(f"file: {size:,} bytes, {args.runs} rounds, load average {os.getloadavg()[0]:.1f} "
              f"on {os.cpu_count()} CPUs")
        print(f"median ratio provisioner fetch (CLI, incl. Python start) / curl: "
              f"{statistics.median(c / p for c, p, _ in rounds):.2f}x  (goal >= 0.8x)")
        print(f"median ratio fetch_one() in-process / curl:                     "
              f"{statistics.median(c / lib for c, _, lib in rounds):.2f}x")


if __name__ == "__main__":
    main()
