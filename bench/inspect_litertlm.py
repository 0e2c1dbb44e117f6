#!/usr/bin/env python3
"""Benchmark: `provisioner inspect` vs `strings | grep` on a Gemma-sized (3.3 GB) sparse .litertlm.

The file is a real LiteRT-LM container (litert-lm-builder) padded sparse to 3,294,593,024 bytes
with the DISPATCH_OP context binary - and so the QAIRT build id - at the very end, where the
real model keeps it: `strings` must scan everything, the inspector reads the header, the TFLite
op table and a window of the context binary. Prints measured numbers; asserts nothing.
The CLI is run several times (it takes a tenth of a second, so one run is at the mercy of the
scheduler on a shared machine) and its median is compared with one `strings | grep` pass.
Goals: >= 100x faster, < 16 MB read.

    python3 bench/inspect_litertlm.py [--size BYTES] [--dir DIR] [--cli-runs N]
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the checkout's provisioner and tests/ before an installed copy

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

from provisioner.artifacts.inspect import inspect_path  # noqa: E402
from provisioner.sim.synthetic_models import make_litertlm  # noqa: E402

PATTERN = r"2\.4[0-9]\.0\.[0-9]{6}"


def strings_grep(path: Path) -> tuple[float, list[str]]:
    t = time.perf_counter()
    strings = subprocess.Popen(["strings", str(path)], stdout=subprocess.PIPE)
    grep = subprocess.run(["grep", "-Eo", PATTERN], stdin=strings.stdout, capture_output=True, text=True)
    strings.stdout.close()  # type: ignore[union-attr]
    strings.wait()
    return time.perf_counter() - t, sorted(set(grep.stdout.split()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=3_294_593_024)
    ap.add_argument("--dir", type=Path, default=None, help="where to create the sparse file (default: temp dir)")
    ap.add_argument("--cli-runs", type=int, default=7, help="CLI runs; the median is compared")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        f = Path(tmp) / "gemma-4-E2B-it_qualcomm_qcs8275.litertlm"
        t = time.perf_counter()
        make_litertlm(f, "2.44.0.260225", pad_to=args.size)
        st = f.stat()
        print(f"file: {st.st_size:,} bytes apparent, {st.st_blocks * 512:,} on disk "
              f"(made in {time.perf_counter() - t:.2f} s)")

        cli_times = []
        for _ in range(args.cli_runs):
            t = time.perf_counter()
            cli = subprocess.run([sys.executable, "-m", "provisioner", "inspect", str(f), "--json"],
                                 capture_output=True, text=True, check=True, cwd=ROOT)
            cli_times.append(time.perf_counter() - t)
        t_cli = statistics.median(cli_times)
        data = json.loads(cli.stdout)

        inspect_path(f)  # warm imports
        t = time.perf_counter()
        ins = inspect_path(f)
        t_lib = time.perf_counter() - t

        t_strings, found = strings_grep(f)

        print(f"provisioner inspect (CLI, incl. Python start): {t_cli:8.3f} s  -> QAIRT {data['qairt_builds']}  "
              f"(median of {len(cli_times)}, min {min(cli_times):.3f} s, max {max(cli_times):.3f} s)")
        print(f"inspect_path() in-process:                      {t_lib:8.4f} s  -> QAIRT {ins.qairt_builds}")
        print(f"strings | grep -Eo '{PATTERN}':   {t_strings:8.3f} s  -> {found}")
        print(f"ratio strings / CLI:        {t_strings / t_cli:10.1f}x   (goal >= 100x)")
        print(f"ratio strings / in-process: {t_strings / t_lib:10.1f}x")
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        print(f"bytes read by inspect: {data['bytes_read']:,} ({data['bytes_read'] / 2**20:.3f} MiB; goal < 16 MiB) "
              f"of {st.st_size:,}")


if __name__ == "__main__":
    main()
