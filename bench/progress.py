#!/usr/bin/env python3
"""Benchmark: the bitbake output parser (provisioner.image.bitbake_log) on a 200,000-line log.

Goal: parse 200k lines in < 2 s, and add little on top of merely streaming the same output
through the build runner (the live case). Prints measured figures; never asserts.

    python3 bench/progress.py [--lines 200000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's provisioner first

from provisioner.image.bitbake_log import BitbakeProgress, parse_log  # noqa: E402
from provisioner.process import GracefulStop, run_streaming  # noqa: E402

RECIPES = ["zlib-1.3.1-r0", "gcc-15.2.0-r0", "linux-qcom-6.18-r0", "glibc-2.42-r0",
           "qairt-runtime-2.44.0.260225-r0", "systemd-258-r0", "python3-3.13.5-r0", "qcom-multimedia-image-1.0-r0"]
TASKS = ["do_fetch", "do_unpack", "do_patch", "do_configure", "do_compile", "do_install", "do_package"]


def synth_log(n: int) -> list[str]:
    """A realistic mix: setscene, task progress, started/succeeded notes, compiler output, warnings."""
    lines = ["2026-11-30 03:10:02 - INFO     - kas 5.5 started", "Parsing recipes...done.",
             "Sstate summary: Wanted 9000 Local 6000 Mirrors 1500 Missed 1500 Current 2000 (83% match, 88% complete)"]
    total = n // 6
    i = 0
    while len(lines) < n - 2:
        i += 1
        r = RECIPES[i % len(RECIPES)]
        t = TASKS[i % len(TASKS)]
        if i < total // 4:
            lines.append(f"NOTE: Running setscene task {i} of {total // 4} (/work/oe-core/meta/recipes/{r}.bb:"
                         f"{t}_setscene)")
        else:
            lines.append(f"NOTE: Running task {i} of {total} (/work/oe-core/meta/recipes/{r}.bb:{t})")
        lines.append(f"NOTE: recipe {r}: task {t}: Started")
        lines.append(f"|   CC      drivers/soc/qcom/file{i}.o")
        lines.append(f"| x86_64-linux-gcc -O2 -pipe -c ../src/file{i}.c -o file{i}.o")
        lines.append(f"WARNING: {r} {t}: QA Issue: File /usr/lib/lib{i}.so has no GNU_HASH [ldflags]" if i % 50 == 0
                     else f"|   LD      vmlinux.o part {i}")
        lines.append(f"NOTE: recipe {r}: task {t}: Succeeded")
    lines.append(f"NOTE: Tasks Summary: Attempted {total} tasks of which 100 didn't need to be rerun and all "
                 "succeeded.")
    return lines[:n]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=200_000)
    args = ap.parse_args()
    lines = synth_log(args.lines)

    t0 = time.perf_counter()
    p = parse_log(lines)
    parse_s = time.perf_counter() - t0
    print(f"parser: {len(lines)} lines in {parse_s:.3f} s ({len(lines) / parse_s / 1e6:.2f} M lines/s; goal < 2 s) "
          f"-> task {p.task}/{p.task_total}, sstate match {p.sstate.match_pct if p.sstate else None}%")

    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "in.log"
        log.write_text("\n".join(lines) + "\n")

        def stream(on_line) -> float:
            out = Path(d) / "out.log"
            out.unlink(missing_ok=True)
            t = time.perf_counter()
            run_streaming(["cat", str(log)], on_line=on_line, log_path=out, env={"PATH": "/usr/bin:/bin"},
                          graceful=GracefulStop(grace_s=5))
            return time.perf_counter() - t

        base = min(stream(lambda _ln: None) for _ in range(3))
        live = BitbakeProgress()
        with_parser = min(stream(live.feed) for _ in range(3))
    extra = with_parser - base
    print(f"live stream through the build runner: {base:.3f} s without parser, {with_parser:.3f} s with "
          f"(+{extra:.3f} s, {100 * extra / base:.0f}% of streaming cost, "
          f"{1e6 * extra / len(lines):.2f} us per line)")


if __name__ == "__main__":
    main()
