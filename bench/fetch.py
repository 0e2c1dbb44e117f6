#!/usr/bin/env python3
"""Benchmark: `provisioner fetch` throughput vs `curl` from the same local HTTP server.

Serves a random file from 127.0.0.1 (the Range-capable test server), downloads it with
`curl -o` and with `provisioner fetch` (which also hashes every byte for the sha256 check and
writes through a .part file), best of N runs each. Prints measured numbers; asserts nothing.
Goal: provisioner >= 0.8x curl.

    python3 bench/fetch.py [--mb 512] [--runs 3]
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
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

from provisioner.artifacts.fetch import FetchItem, fetch_one  # noqa: E402
from tests.artifacts.rangeserver import RangeServer  # noqa: E402


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
        with open(t / "srv" / name, "wb") as f:
            block = os.urandom(4 << 20)
            for i in range(args.mb // 4):
                chunk = bytes([i & 0xFF]) + block[1:]
                f.write(chunk)
                h.update(chunk)
        size = (args.mb // 4) * (4 << 20)
        with RangeServer(t / "srv") as srv:
            manifest = t / "m.yaml"
            manifest.write_text(
                "release: bench\nboard: iq-8275-evk\nqairt: ['2.44.0.260225']\nmodels:\n"
                f"  - {{name: m, kind: litertlm, url: '{srv.url(name)}', qairt: '2.44.0.260225', "
                f"sha256: '{h.hexdigest()}', size: {size}}}\nbuild: {{dl_dir: dl}}\n")
            curl_s, prov_s, lib_s = [], [], []
            for _ in range(args.runs):
                out = t / "curl.bin"
                start = time.perf_counter()
                subprocess.run(["curl", "-sS", "-f", "-o", str(out), srv.url(name)], check=True)
                curl_s.append(time.perf_counter() - start)
                out.unlink()
                shutil.rmtree(t / "dl", ignore_errors=True)
                start = time.perf_counter()
                subprocess.run([sys.executable, "-m", "provisioner", "fetch", str(manifest), "--models-only", "--json"],
                               check=True, capture_output=True, cwd=ROOT)
                prov_s.append(time.perf_counter() - start)
                shutil.rmtree(t / "dl", ignore_errors=True)
                (t / "dl").mkdir()
                start = time.perf_counter()
                fetch_one(FetchItem(name, [srv.url(name)], "model", "m", sha256=h.hexdigest(), size=size), t / "dl")
                lib_s.append(time.perf_counter() - start)
        mb = size / 1e6
        c, p, lib = min(curl_s), min(prov_s), min(lib_s)
        print(f"file: {size:,} bytes, best of {args.runs}")
        print(f"curl -o:                                 {c:7.3f} s  {mb / c:8.1f} MB/s")
        print(f"provisioner fetch (+sha256, .part, CLI): {p:7.3f} s  {mb / p:8.1f} MB/s")
        print(f"fetch_one() in-process (+sha256, .part): {lib:7.3f} s  {mb / lib:8.1f} MB/s")
        print(f"ratio provisioner CLI / curl throughput: {c / p:.2f}x  (goal >= 0.8x; includes ~0.4 s Python start)")
        print(f"ratio in-process / curl throughput:      {c / lib:.2f}x")


if __name__ == "__main__":
    main()
