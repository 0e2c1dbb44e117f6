#!/usr/bin/env python3
"""Benchmark: `provisioner fetch` throughput vs `curl` from the same local HTTP server.

Serves a random file from 127.0.0.1 (the Range-capable test server, in its own process) and
downloads it with `curl -o`, with `provisioner fetch` (CLI, incl. Python start: also hashes every
byte for the sha256 check and writes through a .part file) and with `fetch_one()` in-process. The
order rotates every round so neither page-cache nor load effects favour one of them. Prints
per-round wall and CPU seconds (user+sys: what a loaded machine makes everyone queue for) and
median ratios; asserts nothing. Goal: provisioner >= 0.8x curl.

curl does not verify anything, so a like-for-like reference is printed too: `curl -o` followed by
`sha256sum` of the file (what a careful user runs by hand). The goal ratio stays the stricter
plain-curl one.

    python3 bench/fetch.py [--mb 1024] [--runs 3]
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the checkout's provisioner and tests/ before an installed copy

import argparse  # noqa: E402
import hashlib  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
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
            cli = [sys.executable, "-m", "provisioner", "fetch", str(manifest), "--models-only", "--json"]
            out = t / "curl.bin"

            def run_curl() -> None:
                subprocess.run(["curl", "-sS", "-f", "-o", str(out), url], check=True)

            def run_curl_sha() -> None:
                run_curl()
                got = subprocess.run(["sha256sum", str(out)], check=True, capture_output=True, text=True).stdout
                assert got.split()[0] == h.hexdigest()

            def run_cli() -> None:
                subprocess.run(cli, check=True, capture_output=True, cwd=ROOT)

            def run_lib() -> None:
                (t / "dl").mkdir()
                fetch_one(FetchItem(name, [url], "model", "m", sha256=h.hexdigest(), size=size), t / "dl")

            contenders = [("curl", run_curl), ("curl+sha256sum", run_curl_sha), ("CLI", run_cli),
                          ("in-process", run_lib)]
            who = (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)  # the bench itself (in-process) + children
            for r in range(args.runs):
                times: dict[str, tuple[float, float]] = {}
                for label, fn in contenders[r % 4:] + contenders[:r % 4]:
                    out.unlink(missing_ok=True)
                    shutil.rmtree(t / "dl", ignore_errors=True)
                    subprocess.run(["sync"], check=True)
                    before = [resource.getrusage(w) for w in who]
                    start = time.perf_counter()
                    fn()
                    wall = time.perf_counter() - start
                    after = [resource.getrusage(w) for w in who]
                    cpu = sum(a.ru_utime + a.ru_stime - b.ru_utime - b.ru_stime
                              for a, b in zip(after, before, strict=True))
                    times[label] = (wall, cpu)
                out.unlink(missing_ok=True)
                shutil.rmtree(t / "dl", ignore_errors=True)
                rounds.append(times)
                mb = size / 1e6
                c = times["curl"][0]
                print("round: " + " | ".join(f"{k} {mb / w:6.1f} MB/s ({c / w:.2f}x, cpu {cpu:.2f} s)"
                                             for k, (w, cpu) in times.items()), flush=True)
        finally:
            server.kill()
        print(f"file: {size:,} bytes, {args.runs} rounds, load average {os.getloadavg()[0]:.1f} "
              f"on {os.cpu_count()} CPUs")

        def median_ratio(label: str, ref: str = "curl") -> float:
            return statistics.median(r[ref][0] / r[label][0] for r in rounds)

        print(f"median ratio provisioner fetch (CLI, incl. Python start) / curl: {median_ratio('CLI'):.2f}x  "
              "(goal >= 0.8x)")
        print(f"median ratio fetch_one() in-process / curl:                     {median_ratio('in-process'):.2f}x")
        print(f"median ratio CLI / (curl + sha256sum), like for like:           "
              f"{median_ratio('CLI', 'curl+sha256sum'):.2f}x")
        print("median CPU seconds (user+sys): " + ", ".join(
            f"{k} {statistics.median(r[k][1] for r in rounds):.2f}" for k in rounds[0]))

if __name__ == "__main__":
    main()
