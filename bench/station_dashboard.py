"""The station dashboard's cost, for bench/station.py (run that; this module has no main).

Rounds of one flash of 8 virtual boards, alternating: no dashboard at all, then `provisioner
station dashboard` running (its own process, as on a station) with Debian's chromium showing the
page. Reported per board: the station's own CPU (this process: flash threads, records, the live
feed), the dashboard process's CPU and the browser's, and the medians over the rounds. The
latency is measured in the page: each tile carries the time of the board event behind it
(``data-ts``), and an observer notes when the tile shows it (same host clock).
"""

from __future__ import annotations

import os
import resource
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's provisioner and tests/

from provisioner import context  # noqa: E402
from provisioner.sim.board import VirtualBoard  # noqa: E402
from provisioner.sim.qdl import install_wrappers  # noqa: E402
from provisioner.station import feed  # noqa: E402
from provisioner.station.config import StationConfig  # noqa: E402
from provisioner.station.flash import FlashOptions, flash_release  # noqa: E402
from provisioner.station.records import Records  # noqa: E402
from tests.station import browser  # noqa: E402

BOARDS = 8
ROOT = Path(__file__).resolve().parents[1]
_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_self() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _tree_cpu(root: int) -> float:
    """CPU seconds of ``root`` and every live descendant (/proc/<pid>/stat utime + stime)."""
    parent: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(d.name)] = int(fields[1])
        cpu[int(d.name)] = (int(fields[11]) + int(fields[12])) / _TICK
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += cpu.get(pid, 0.0)
        todo += [p for p, pp in parent.items() if pp == pid]
    return total


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_dashboard(config_file: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-m", "provisioner", "station", "dashboard", "--config",
                             str(config_file), "--port", str(port)], stdout=log.open("wb"), stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        if proc.poll() is not None:
            raise SystemExit(f"dashboard did not start: {log.read_text()}")
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("dashboard did not listen within 30 s")


def _wait(drv: Any, js: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if drv.execute_script("return " + js):
            return
        time.sleep(0.05)
    raise SystemExit(f"page never showed: {js}")


class Station:
    """A sim root with boards in EDL, its station.yaml (for the dashboard process) and config."""

    def __init__(self, root: Path, n: int, prefix: str) -> None:
        wrappers = install_wrappers(root)
        self.boards = [VirtualBoard.create(root, "iq-8275-evk", f"{prefix}{i:05X}", f"1-{i // 4 + 1}.{i % 4 + 1}")
                       for i in range(n)]
        slots = {b.slot: f"slot {i + 1}" for i, b in enumerate(self.boards)}
        self.config = StationConfig(sysfs_root=root / "sysfs", qdl=str(wrappers["qdl"]), database=root / "station.db",
                                    log_dir=root / "logs", slots=slots)
        self.config_file = root / "station.yaml"
        import yaml

        self.config_file.write_text(yaml.safe_dump({"sysfs_root": str(self.config.sysfs_root),
                                                    "database": str(self.config.database), "slots": slots}))

    def flash(self, release: Path, serials: list[str] | None = None) -> tuple[float, float, Any]:
        """(station CPU s, wall s, run) of one flash of ``serials`` (default all), boards put in EDL first."""
        chosen = [b for b in self.boards if serials is None or b.serial in serials]
        for b in chosen:
            b.set_state("edl")
        c0, t0 = _cpu_self(), time.monotonic()
        with Records(self.config.database) as rec:
            run = flash_release(release, self.config, context.current(),
                                FlashOptions(serials=tuple(b.serial for b in chosen), retries=0), records=rec)
        return _cpu_self() - c0, time.monotonic() - t0, run


def _count_feed_cpu() -> list[float]:
    """Attribute the station's one extra piece of work directly: CPU spent in the live feed's sender,
    in the flash threads that queue events and in the thread that sends them (thread CPU time)."""
    spent: list[float] = []

    def timed(func: Any) -> Any:
        def wrapper(*args: Any) -> Any:
            t0 = time.thread_time()
            try:
                return func(*args)
            finally:
                spent.append(time.thread_time() - t0)
        return wrapper

    feed.FeedSender.__call__ = timed(feed.FeedSender.__call__)  # type: ignore[method-assign]
    feed.FeedSender._send = timed(feed.FeedSender._send)        # type: ignore[method-assign]
    return spent


def dashboard_cost(release: Path, work: Path, *, rounds: int = 3, screenshots: Path | None = None) -> None:
    why = browser.missing()
    if why:
        print(f"dashboard: skipped ({why})")
        return
    feed_cpu = _count_feed_cpu()
    sender_cpu: list[float] = []
    sender_calls: list[float] = []
    st = Station(work / "dash", BOARDS, "0DA")
    off_cpu: list[float] = []
    on_cpu: list[float] = []
    dash_cpu: list[float] = []
    browser_cpu: list[float] = []
    latencies: list[float] = []
    st.flash(release)     # warm-up: imports, page cache, database created
    for _ in range(rounds):
        cpu, _wall, run = st.flash(release)
        if not run.ok:
            raise SystemExit(f"flash failed: {[r.error for r in run.failed]}")
        off_cpu.append(cpu / BOARDS)
        port = _free_port()
        dash = _start_dashboard(st.config_file, port, work / "dashboard.log")
        drv = browser.start()
        try:
            drv.get(f"http://127.0.0.1:{port}/")
            _wait(drv, f"document.querySelectorAll('.tile').length === {BOARDS} && "
                       "document.getElementById('link').textContent === 'live'")
            drv.execute_script(browser.WATCH_TILES_JS)
            driver_pid = drv.service.process.pid
            d0, b0, start = _tree_cpu(dash.pid), _tree_cpu(driver_pid), time.time()
            feed_cpu.clear()
            cpu, _wall, run = st.flash(release)
            sender_cpu.append(sum(feed_cpu) / BOARDS)
            sender_calls.append(len(feed_cpu) / BOARDS)
            _wait(drv, f"document.querySelectorAll('.tile[data-phase=\"passed\"]').length === {BOARDS}")
            dash_cpu.append((_tree_cpu(dash.pid) - d0) / BOARDS)
            browser_cpu.append((_tree_cpu(driver_pid) - b0) / BOARDS)
            on_cpu.append(cpu / BOARDS)
            shown = drv.execute_script("return window.__shown")
            latencies += [(seen - ts) * 1000 for ts, seen in shown if ts >= start]
        finally:
            drv.quit()
            dash.terminate()
            dash.wait(timeout=10)
    off, on = statistics.median(off_cpu), statistics.median(on_cpu)
    more = (on / off - 1) * 100
    print(f"dashboard: {BOARDS} boards x {rounds} rounds; station CPU per board without the dashboard "
          f"{off * 1000:.1f} ms (rounds {', '.join(f'{x * 1000:.0f}' for x in off_cpu)}), with it open in chromium "
          f"{on * 1000:.1f} ms (rounds {', '.join(f'{x * 1000:.0f}' for x in on_cpu)}): {more:+.1f}% "
          f"(goal < 5% more: {'met' if more < 5 else 'NOT met'})")
    sent = statistics.median(sender_cpu)
    print(f"dashboard: the station's added work measured directly, its live feed sender: {sent * 1000:.2f} ms CPU "
          f"per board ({statistics.median(sender_calls):.0f} calls per board) = "
          f"{sent / off * 100:.1f}% of the "
          "station's CPU without the dashboard (the A/B above includes this machine's noise)")
    print(f"dashboard: its own process {statistics.median(dash_cpu) * 1000:.1f} ms CPU per board, the browser "
          f"{statistics.median(browser_cpu) * 1000:.1f} ms per board (their own processes, not the station's)")
    if latencies:
        lat = sorted(latencies)
        p95 = lat[min(len(lat) - 1, int(len(lat) * 0.95))]
        print(f"dashboard: board event -> tile shown, {len(lat)} tile updates: median {statistics.median(lat):.0f} ms, "
              f"p95 {p95:.0f} ms, max {lat[-1]:.0f} ms (goal < 250 ms: {'met' if p95 < 250 else 'NOT met'} at p95)")
    if screenshots is not None:
        _screenshots(release, work, screenshots)


def _screenshots(release: Path, work: Path, out: Path) -> None:
    """PNGs of a station with a passed, a failed and flashing boards (for the README)."""
    st = Station(work / "shots", 6, "0AB")
    st.boards[1].add_fault("edl-drop")
    port = _free_port()
    dash = _start_dashboard(st.config_file, port, work / "dashboard-shots.log")
    drv = browser.start(1280, 900)
    out.mkdir(parents=True, exist_ok=True)
    try:
        drv.get(f"http://127.0.0.1:{port}/")
        st.flash(release, [b.serial for b in st.boards[:3]])      # slot 1 passes, slot 2 fails, slot 3 passes
        _wait(drv, "document.querySelectorAll('.tile[data-phase=\"passed\"]').length === 2")
        st.boards[5].set_state("edl")                              # slot 6: plugged in, waiting in EDL
        os.environ["PROVISIONER_SIM_QDL_RATE_KBPS"] = "1024"       # the next boards flash slowly: caught mid-way
        import threading

        th = threading.Thread(target=st.flash, args=(release, [b.serial for b in st.boards[3:5]]))
        th.start()
        _wait(drv, "[...document.querySelectorAll('.tile[data-phase=\"flashing\"] .bar > div')]"
                   ".some((d) => parseFloat(d.style.width) >= 40)", 120)
        drv.save_screenshot(str(out / "station-dashboard.png"))
        th.join()
        _wait(drv, "document.querySelectorAll('.tile[data-phase=\"passed\"]').length === 4", 300)
        drv.save_screenshot(str(out / "station-dashboard-done.png"))
        print(f"dashboard: screenshots {out / 'station-dashboard.png'} (mid-run), {out / 'station-dashboard-done.png'}")
    finally:
        drv.quit()
        dash.terminate()
        dash.wait(timeout=10)
