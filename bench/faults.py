"""Fault matrix: run the station through kill -9, full disks and other faults on virtual boards.

Each row starts ``provisioner station flash`` as a subprocess on its own sim root, injects one
fault, then checks what a user would: did any qdl outlive the station, is any attempt left
``running``, does every board qdl finished writing have an attempt that says ``passed``, what
did the station print, and what happens on the rerun. Needs root (tmpfs mounts). Not a test:
it prints a table, then bench/fleet_faults.py's table (the fleet, build inputs, caches) below it.
Usage: python3 bench/faults.py [--bitbake DIR]   (DIR: a bitbake checkout, for the cache serve row)
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout's provisioner and tests/ before an installed copy

import errno  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Any  # noqa: E402

from provisioner.image.release import write_release  # noqa: E402
from provisioner.manifest import load_manifest  # noqa: E402
from provisioner.sim.board import VirtualBoard  # noqa: E402
from provisioner.sim.bundle import make_bundle  # noqa: E402
from provisioner.sim.qdl import install_wrappers  # noqa: E402
from provisioner.sim.synthetic_models import make_litertlm  # noqa: E402
from provisioner.station.records import Records  # noqa: E402


@dataclass
class Rig:
    """One sim root with boards in EDL, a records database and a log folder."""

    root: Path
    release: Path
    db: Path
    log_dir: Path
    boards: list[VirtualBoard]
    qdl: str
    t0: float = 0.0

    def argv(self, qdl: str | None = None) -> list[str]:
        cfg = self.root / "station.yaml"
        cfg.write_text(json.dumps({"log_dir": str(self.log_dir)}))
        return [sys.executable, "-m", "provisioner", "station", "flash", str(self.release), "--all",
                "--qdl", qdl or self.qdl, "--sysfs-root", str(self.root / "sim" / "sysfs"), "--db", str(self.db),
                "--config", str(cfg)]

    def start(self, *, qdl: str | None = None, rate_kbps: int = 400) -> subprocess.Popen:
        env = dict(os.environ, PROVISIONER_SIM_QDL_RATE_KBPS=str(rate_kbps), PYTHONPATH=str(ROOT))
        if not rate_kbps:
            env.pop("PROVISIONER_SIM_QDL_RATE_KBPS")
        return subprocess.Popen(self.argv(qdl), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True)

    def qdl_pids(self) -> list[int]:
        needle = f"PROVISIONER_SIM_ROOT={self.root / 'sim'}".encode()
        out = []
        for d in Path("/proc").iterdir():
            try:
                if d.name.isdigit() and b"provisioner.sim.qdl" in (d / "cmdline").read_bytes() \
                        and needle in (d / "environ").read_bytes():
                    out.append(int(d.name))
            except OSError:
                continue
        return out

    def wait_flashing(self, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.db.exists():
                with Records(self.db, writer=False) as rec:
                    rows = rec.history()
                if rows and all(r["state"] == "flashing" for r in rows) and len(self.qdl_pids()) == len(rows):
                    return
            time.sleep(0.05)
        raise RuntimeError("the station never started flashing")

    def quiet_qdl(self, *, keep_death_signal: bool) -> str:
        """qdl with its output in a file (silent like a real qdl writing a large partition), and
        optionally without the parent-death signal (like a qdl with file capabilities)."""
        path = self.root / ("qdl-quiet" if keep_death_signal else "qdl-caps")
        path.write_text(f"#!{sys.executable}\nimport ctypes, os, sys\n"
                        + ("" if keep_death_signal else "ctypes.CDLL(None).prctl(1, 0, 0, 0, 0)\n")
                        + "if sys.argv[1:2] != ['--version']:\n"
                        f"    fd = os.open({str(path) + '.out'!r}, os.O_WRONLY | os.O_CREAT | os.O_APPEND)\n"
                        "    os.dup2(fd, 1)\n    os.dup2(fd, 2)\n"
                        f"os.execv({self.qdl!r}, [{self.qdl!r}] + sys.argv[1:])\n")
        path.chmod(0o755)
        return str(path)

    def next_start(self) -> list[str]:
        """What the next station start settles and says (it opens the records as the writer)."""
        if not self.db.exists():
            return []
        with Records(self.db) as rec:
            return list(rec.recovery_notes)

    def lost(self, survivors: int) -> str:
        """'nothing', or what was lost: a qdl that outlived the fault (and was not ended at the
        next start), an attempt left open, a board qdl finished writing without a passed record."""
        problems = []
        if survivors and self.qdl_pids():
            problems.append(f"{len(self.qdl_pids())} qdl still running after the next start")
        rows = []
        if self.db.exists():
            with Records(self.db, writer=False) as rec:
                rows = rec.history()
        if any(r["result"] == "running" for r in rows):
            problems.append("attempt left running")
        passed = {r["serial"] for r in rows if r["result"] == "passed"}
        for b in self.boards:
            if (getattr(b.reload(), "flashed", None) or 0) > self.t0 and b.serial not in passed:
                problems.append(f"{b.serial} flashed but not recorded as passed")
        return "; ".join(problems) or "nothing"

    def rerun(self) -> str:
        """Boards back into EDL (the operator's EDL button), flash again at full speed."""
        for b in self.boards:
            b.reload().set_state("edl")
        p = self.start(rate_kbps=0)
        _, err = p.communicate(timeout=300)
        warnings = [ln.split("): ", 1)[-1] for ln in err.splitlines() if ln.startswith("warning:")]
        with Records(self.db, writer=False) as rec:
            last = {}
            for r in reversed(rec.history()):
                last[r["serial"]] = r["result"]
        what = f"exit {p.returncode}, latest " + ",".join(sorted(set(last.values())))
        return what + (f"; {warnings[0]}" + (f" (+{len(warnings) - 1})" if len(warnings) > 1 else "")
                       if warnings else "")


def make_rig(work: Path, name: str, release: Path, n: int = 2, *, disk: Path | None = None,
             logs_on_disk: bool = True) -> Rig:
    root = work / name
    wrappers = install_wrappers(root / "sim")
    boards = []
    for i in range(n):
        vb = VirtualBoard.create(root / "sim", "iq-8275-evk", f"0FA{i:05X}", f"1-4.{i + 1}")
        vb.set_state("edl")
        boards.append(vb)
    store = disk or root
    return Rig(root, release, store / "station.db", (store if logs_on_disk else root) / "logs", boards,
               str(wrappers["qdl"]), time.time())


def mount_tmpfs(path: Path, size: str = "4m") -> Path:
    path.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    return path


def fill(mnt: Path, name: str) -> Path:
    path = mnt / name
    with open(path, "ab", buffering=0) as f:
        for size in (65536, 4096, 1):
            try:
                while True:
                    f.write(b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
    return path


def last_line(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


# -- the rows --------------------------------------------------------------------------------------

def kill_9(rig: Rig) -> str:
    p = rig.start(qdl=rig.quiet_qdl(keep_death_signal=True), rate_kbps=40)
    rig.wait_flashing()
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    return "killed, no output"


def kill_9_qdl_escapes(rig: Rig) -> str:
    p = rig.start(qdl=rig.quiet_qdl(keep_death_signal=False), rate_kbps=40)
    rig.wait_flashing()
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    return "killed, no output"


def sigterm(rig: Rig) -> str:
    p = rig.start(qdl=rig.quiet_qdl(keep_death_signal=True), rate_kbps=40)
    rig.wait_flashing()
    p.terminate()
    p.wait()
    return f"exit {p.returncode}, no output"


def ctrl_c(rig: Rig) -> str:
    p = rig.start(rate_kbps=400)
    rig.wait_flashing()
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    return f"exit {p.returncode}: {last_line(err)}"


def full_before_start(rig: Rig) -> str:
    filler = fill(rig.db.parent, "filler")
    p = rig.start(rate_kbps=0)
    _, err = p.communicate(timeout=60)
    filler.unlink()
    return f"exit {p.returncode}: {last_line(err)}"


def full_mid_flash(rig: Rig) -> str:
    p = rig.start(rate_kbps=400)
    rig.wait_flashing()
    filler = fill(rig.db.parent, "filler")
    _, err = p.communicate(timeout=120)
    filler.unlink()
    return f"exit {p.returncode}: {last_line(err)}"


def full_db_no_reserve(rig: Rig) -> str:
    """The records disk fills up and stays full even after the reserve is gone; logs elsewhere."""
    p = rig.start(rate_kbps=400)
    rig.wait_flashing()
    fillers = [fill(rig.db.parent, "filler")]
    rig.db.with_name(rig.db.name + ".reserve").unlink(missing_ok=True)
    fillers.append(fill(rig.db.parent, "more"))
    _, err = p.communicate(timeout=120)
    for f in fillers:
        f.unlink()
    return f"exit {p.returncode}: {last_line(err)}"


def edl_drop(rig: Rig) -> str:
    rig.boards[1].add_fault("edl-drop")
    p = subprocess.Popen(rig.argv() + ["--retries", "0"], env=dict(os.environ, PYTHONPATH=str(ROOT)),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _, err = p.communicate(timeout=120)
    rig.boards[1].clear_fault("edl-drop")  # the cable re-seated before the rerun
    return f"exit {p.returncode}: {last_line(err)[:110]}"


def hostile_copy(rig: Rig, edit: Callable[[Path, Path], None]) -> Path:
    """A bare bundle copied from the rig's release and edited by ``edit(bundle, outside)``."""
    bundle = rig.root / "hostile"
    shutil.copytree(next((rig.release / "flash").iterdir()), bundle, symlinks=True)
    outside = rig.root / "station-secret.bin"
    outside.write_bytes(b"\xa5" * 4096)
    edit(bundle, outside)
    return bundle


def refused_flash(rig: Rig, bundle: Path) -> str:
    """Flash ``bundle``: the station must refuse it before any qdl writes (a logging qdl counts the starts)."""
    calls = rig.root / "qdl-calls"
    qdl = rig.root / "qdl-logging"
    qdl.write_text(f"#!{sys.executable}\nimport os, sys\nif sys.argv[1:2] != ['--version']:\n"
                   f"    open({str(calls)!r}, 'a').write(' '.join(sys.argv) + '\\n')\n"
                   f"os.execv({rig.qdl!r}, [{rig.qdl!r}] + sys.argv[1:])\n")
    qdl.chmod(0o755)
    good, rig.release = rig.release, bundle
    try:
        p = subprocess.run(rig.argv(str(qdl)) + ["--board", "iq-8275-evk"], capture_output=True, text=True,
                           timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT)))
        err = p.stderr
    finally:
        rig.release = good                      # the rerun flashes the good release
    started = len(calls.read_text().splitlines()) if calls.exists() else 0
    return f"exit {p.returncode}, qdl started {started}x: {last_line(err)[:160]}"


def hostile_bundle(rig: Rig) -> str:
    def edit(bundle: Path, outside: Path) -> None:
        raw = bundle / "rawprogram0.xml"
        raw.write_text(raw.read_text().replace('filename="efi.bin"', f'filename="{outside}"', 1))
        raw = bundle / "rawprogram1.xml"
        raw.write_text(raw.read_text().replace('filename="', 'filename="../station-secret.bin" x="', 1))
        (bundle / "cdt.bin").unlink()
        (bundle / "cdt.bin").symlink_to(outside)
    bundle = hostile_copy(rig, edit)
    p = subprocess.run([sys.executable, "-m", "provisioner", "station", "preflight", str(bundle), "--board",
                        "iq-8275-evk"], capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    refused = [ln.strip() for ln in p.stderr.splitlines() if "refused:" in ln or "outside the bundle" in ln]
    return f"preflight exit {p.returncode}: {' / '.join(refused)[:200]}; flash: {refused_flash(rig, bundle)}"


def odd_digits(rig: Rig) -> str:
    def edit(bundle: Path, _outside: Path) -> None:
        raw = bundle / "rawprogram0.xml"
        raw.write_text(raw.read_text().replace('num_partition_sectors="4096"', 'num_partition_sectors="\u00b2"', 1))
    return "'\u00b2': " + refused_flash(rig, hostile_copy(rig, edit))


ROWS: list[tuple[str, Callable[[Rig], str], bool]] = [
    ("1 hostile bundle: absolute, '..', link out", hostile_bundle, False),
    ("9 '\u00b2' in a rawprogram number", odd_digits, False),
    ("2 kill -9 mid-flash", kill_9, False),
    ("2 kill -9, qdl without pdeathsig", kill_9_qdl_escapes, False),
    ("2 SIGTERM mid-flash", sigterm, False),
    ("2 Ctrl-C mid-flash", ctrl_c, False),
    ("3 records disk full before start", full_before_start, True),
    ("3 records+log disk fills mid-flash", full_mid_flash, True),
    ("3 records disk full, no reserve left", full_db_no_reserve, True),
    ("2 USB drop on one board", edl_drop, False),
]


def main(bitbake: Path | None = None) -> int:
    if os.geteuid() != 0:
        print("bench/faults.py needs root (tmpfs mounts)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="bench-faults-"))
    mounts: list[Path] = []
    table = []
    try:
        manifest = load_manifest(ROOT / "examples" / "gemma4-e2b-iq8275.yaml")
        model = make_litertlm(work / "m.litertlm")
        bundle = make_bundle(manifest, work / "bundle", model_files={"gemma-4-e2b": model})
        release = write_release(manifest, bundle, work / "out", simulated=True)
        for i, (name, fault, on_tmpfs) in enumerate(ROWS):
            disk = None
            if on_tmpfs:
                disk = mount_tmpfs(work / f"disk{i}")
                mounts.append(disk)
            rig = make_rig(work, f"rig{i}", release, disk=disk, logs_on_disk=fault is not full_db_no_reserve)
            try:
                verdict = fault(rig)
                time.sleep(0.5)  # let the reaper collect what the kernel killed
                survivors = len(rig.qdl_pids())
                notes = rig.next_start()
                if survivors:
                    verdict += f"; {survivors} qdl outlived the station"
                if notes:
                    verdict += f"; next start: {notes[0]}" + (f" (+{len(notes) - 1} more)" if len(notes) > 1 else "")
                lost = rig.lost(survivors)
                recovery = rig.rerun()
            except Exception as exc:  # a row that cannot run is a row, not a crash of the matrix
                lost, verdict, recovery = "?", f"bench error: {type(exc).__name__}: {exc}", ""
            finally:
                for pid in rig.qdl_pids():
                    os.kill(pid, signal.SIGKILL)
            table.append((name, lost, verdict.replace(str(work), "$W"), recovery.replace(str(work), "$W")))
    finally:
        for m in mounts:
            subprocess.run(["umount", "-l", str(m)], check=False)
        subprocess.run(["rm", "-rf", str(work)], check=False)
    print(f"station fault matrix ($W = {work}, removed)")
    print("fault | what was lost | verdict reported | recovery on rerun")
    print("--- | --- | --- | ---")
    for row in table:
        print(" | ".join(row), flush=True)
    fleet = _fleet_faults().main(bitbake)
    print("\nfleet and build-input fault matrix ($W = a temporary folder, removed)")
    print("fault | what was lost | verdict reported | recovery on rerun")
    print("--- | --- | --- | ---")
    for row in fleet:
        print(" | ".join(row))
    return 0 if all(r[1].startswith("nothing") for r in table + fleet) else 1


def _fleet_faults() -> Any:
    """bench/fleet_faults.py (bench/ is no package: loaded by path)."""
    spec = importlib.util.spec_from_file_location("fleet_faults", Path(__file__).with_name("fleet_faults.py"))
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[sys.argv.index("--bitbake") + 1]) if "--bitbake" in sys.argv else None))
