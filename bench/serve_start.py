"""What starting edge-llm-serve costs in imports, per way the package reaches a board.

Three forms, each imported by a fresh interpreter (the service's ``edge_llm_serve.startup``, which pulls
in every module the service runs): the zip application ``fleet launch`` pushes to
/usr/bin/edge-llm-serve (zipimport compiles the sources at every start: it writes no .pyc), the package
in a site-packages directory with compiled .pyc files, and the same directory without them (an image
whose service user cannot write __pycache__). The standard-library modules the service needs are the
baseline. Prints medians in milliseconds and each form's ratio to the compiled directory.
Usage: python3 bench/serve_start.py [--runs 9]
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout's provisioner

import argparse  # noqa: E402
import compileall  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from provisioner import shipped  # noqa: E402


def median_s(argv: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=9)
    args = ap.parse_args()
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        program = work / "edge-llm-serve"
        program.write_bytes(shipped.serve_program())
        for name in ("compiled", "plain"):
            shutil.copytree(shipped.serve_dir() / shipped.SERVE_PACKAGE, work / name / shipped.SERVE_PACKAGE,
                            ignore=shutil.ignore_patterns("__pycache__"))
        compileall.compile_dir(str(work / "compiled"), quiet=1)

        def load(where: Path, flags: list[str]) -> list[str]:
            return [py, *flags, "-c", f"import sys; sys.path.insert(0, {str(where)!r}); import edge_llm_serve.startup"]

        rows = {
            "stdlib only": median_s([py, "-c", "import argparse, ctypes, hmac, http.server, json, selectors, socket"],
                                    args.runs),
            "zip application": median_s(load(program, []), args.runs),
            "site dir, .pyc": median_s(load(work / "compiled", []), args.runs),
            "site dir, no .pyc": median_s(load(work / "plain", ["-B"]), args.runs),
        }
    ref = rows["site dir, .pyc"]
    print(f"{'form':<20} {'ms':>6} {'ratio':>6}   ({len(shipped.serve_program())} B zip, {args.runs} runs)")
    for name, s in rows.items():
        print(f"{name:<20} {s * 1000:6.0f} {s / ref:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
