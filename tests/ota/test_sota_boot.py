"""update-os on virtual sota boards that boot like a QLI sota board (provisioner.sim.sota_root/sota_boot).

The board runs in its booted deployment, its ESP is /boot, systemd-boot counts tries in the entry names and
systemd-bless-boot blesses at boot; every board command goes through the real ostree CLI with the default
sysroot. Each test names the defect of the old update-os it would have caught.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from provisioner.errors import SimError
from provisioner.sim import host, ostree_board
from tests.fleet.simfleet import BoardSpec, build_fleet, can_run
from tests.ota import otafleet as of

pytestmark = pytest.mark.skipif(can_run() is not None or not os.path.exists("/usr/bin/ostree"),
                                reason=str(can_run() or "no ostree"))

NEW_DOWNLOAD_MODE = "qcom_scm.download_mode=1"     # the example image flashes 0; release 2 changes it


def _ssh(board, command: str) -> subprocess.CompletedProcess:
    return subprocess.run(host.ssh_argv(board, command), capture_output=True, text=True, timeout=120)


def _update(fleet, release, url, report, *more):
    proc = subprocess.run([sys.executable, "-m", "provisioner", "fleet", "update-os", "-i", str(fleet.inventory),
                           "--release", str(release), "--repo", url, "--report", str(report), *more],
                          capture_output=True, text=True, timeout=900, env={**os.environ, "COLUMNS": "250"})
    return proc, {b["board"]: b for b in json.loads(report.read_text())["boards"]}


def _entries(board) -> list[str]:
    return sorted(p.name for p in (ostree_board.esp(board) / "loader/entries").glob("*.conf"))


def _status(board) -> list[str]:
    """Plain ``ostree admin status`` on the board: its deployment lines (booted marked '*')."""
    out = _ssh(board, "ostree admin status").stdout
    return [ln.strip() for ln in out.splitlines() if " nodistro " in f" {ln.strip()} "]


@pytest.fixture(scope="module")
def sota(tmp_path_factory):
    base = tmp_path_factory.mktemp("sota")
    names = {"good-8275": (), "badnpu-8275": ("ota-bad-npu",), "noboot-8275": ("ota-no-boot",),
             "gate-8275": ("ota-reboot-in-gate",), "killstage-8275": (), "killgate-8275": (),
             "killrb-8275": ("ota-bad-npu",)}
    fleet = build_fleet(base / "sim", [BoardSpec(n, "iq-8275-evk", faults=f, vars=of.SIM_VARS)
                                       for n, f in names.items()], cache=base / "cache")
    repo = base / "srv"
    rootfs = fleet.rootfs("good-8275")
    rel1, c1 = of.build_release(base, "base-1", of.image_tree(rootfs, base, "base-1"))
    rel2, c2 = of.build_release(base, "os-2", of.image_tree(rootfs, base, "os-2",
                                                            {"usr/lib/edge-llm/security-fix.txt": b"fixed\n" * 100}))
    data = json.loads((rel2 / "release.json").read_text())
    data["ota"]["kargs"] = [NEW_DOWNLOAD_MODE]
    (rel2 / "release.json").write_text(json.dumps(data))
    of.publish(rel1, repo)
    of.publish(rel2, repo)
    of.make_ota_boards(fleet, repo, c1)
    with of.serving(fleet, base, repo) as server:
        yield fleet, base, server, c1, c2, rel2


def test_the_virtual_sota_board_boots_like_a_qli_one(sota):
    """Build 1: / is the booted deployment (plain `ostree admin status` marks it), /sysroot the physical root,
    /boot the ESP with the blessed entry, /usr read-only, /root, /opt, /usr/local where the classes put them."""
    fleet, base, server, c1, c2, rel = sota
    b = fleet.boards["good-8275"]
    assert _status(b)[0] == f"* nodistro {c1}.0"
    dep = ostree_board.sysroot(b) / "ostree/deploy/nodistro/deploy" / f"{c1}.0"
    st = os.stat(dep)
    out = _ssh(b, "stat -c %d:%i /; readlink /root /opt /usr/local; test -e /run/ostree-booted && echo booted-flag; "
                  "ls /sysroot/boot | wc -l; ls /boot/loader/entries; cat /proc/cmdline").stdout
    lines = out.splitlines()
    assert lines[0] == f"{st.st_dev}:{st.st_ino}"
    assert lines[1:4] == ["var/roothome", "var/rootdirs/opt", "../var/usrlocal"]
    assert lines[4] == "booted-flag" and lines[5] == "0"          # sysroot/boot stays empty: the ESP is /boot
    assert lines[6] == "ostree-1.conf"                            # blessed at boot: no tries left in the name
    assert "root=LABEL=otaroot" in lines[7] and "ostree=/ostree/boot." in lines[7]
    assert "Read-only file system" in _ssh(b, "touch /usr/x").stderr
    assert "edge-llm" in _ssh(b, "ls /opt").stdout.split()


def test_update_os_uses_the_booted_sysroot_boot_counting_and_a_rollback_ostree_allows(sota):
    """Defects 1, 2, 5, 6 and a reboot in the middle of the gate, in one rolling run."""
    fleet, base, server, c1, c2, rel = sota
    good, bad, noboot, gate = (fleet.boards[n] for n in ("good-8275", "badnpu-8275", "noboot-8275", "gate-8275"))
    for b in (good, bad):      # /etc written on the running deployment: the merge carries it (defect 1)
        assert _ssh(b, "echo site=1 > /etc/edge-llm/site.conf").returncode == 0
    proc, rows = _update(fleet, rel, server.url, base / "r1.json", "--serial", "4", "--max-fail-percentage", "100",
                         "--limit", "good-8275,badnpu-8275,noboot-8275,gate-8275")
    assert proc.returncode == 1, proc.stdout + proc.stderr

    # defect 1: the default sysroot: booted deployment found, /etc merged, entries on the ESP systemd-boot reads
    assert rows["good-8275"]["verdict"] == "pass", rows["good-8275"]
    assert _status(good) == [f"* nodistro {c2}.0", f"nodistro {c1}.0 (rollback)"]
    assert _ssh(good, "cat /etc/edge-llm/site.conf").stdout == "site=1\n"
    assert _entries(good) == ["ostree-1.conf", "ostree-2.conf"]   # the new one blessed at boot-complete
    assert not any((ostree_board.sysroot(good) / "boot").iterdir())
    # defect 6: the release's kernel argument replaced the old one; the others were carried from the booted one
    cmdline = _ssh(good, "cat /proc/cmdline").stdout
    assert NEW_DOWNLOAD_MODE in cmdline.split() and "qcom_scm.download_mode=0" not in cmdline.split()
    assert "console=ttyMSM0,115200" in cmdline.split() and "root=LABEL=otaroot" in cmdline.split()

    # defect 2: the bad-NPU deployment booted and was blessed; ostree cannot undeploy it while it runs, so the
    # previous one was made the default and booted, and the failed one removed afterwards
    assert rows["badnpu-8275"]["verdict"] == "fail"
    assert rows["badnpu-8275"]["reason"].startswith(f"update to {c2[:12]} rolled back:"), rows["badnpu-8275"]
    assert "tok/s" in rows["badnpu-8275"]["reason"]
    assert _status(bad) == [f"* nodistro {c1}.0"] and _entries(bad) == ["ostree-1.conf"]
    assert _ssh(bad, "cat /etc/edge-llm/site.conf").stdout == "site=1\n"

    # defect 5: boot counting is systemd-boot's, from the entry name ostree gave the new deployment (+3):
    # three tries, then the previous entry; no trial file anywhere
    log = [(e["entry"], e["came_up"]) for e in fleet.boards["noboot-8275"].reload().data["ostree"]["boot_log"]]
    assert log[-4:] == [("ostree-2+2-1.conf", False), ("ostree-2+1-2.conf", False), ("ostree-2+0-3.conf", False),
                        ("ostree-1.conf", True)], log
    assert "did not boot; boot counting fell back" in rows["noboot-8275"]["reason"]
    assert _status(noboot) == [f"* nodistro {c1}.0"] and _entries(noboot) == ["ostree-1.conf"]
    assert not list(fleet.root.rglob("edge-llm-ota-trial"))

    # a power cut in the middle of the gate: the board came back on the (blessed) new deployment, gated again
    assert rows["gate-8275"]["verdict"] == "pass", rows["gate-8275"]
    assert (ostree_board.sysroot(gate) / ".edge-llm-sim-gate-reboot").exists()
    assert _status(gate)[0] == f"* nodistro {c2}.0"


def test_a_second_run_changes_nothing(sota):
    """Every board of the first run is on a committed deployment: a rerun pulls nothing, changes nothing, and
    says why the rolled-back ones stay where they are."""
    fleet, base, server, c1, c2, rel = sota
    names = "good-8275,badnpu-8275,noboot-8275,gate-8275"
    before = {n: (_status(fleet.boards[n]), _entries(fleet.boards[n])) for n in names.split(",")}
    mark = server.mark()
    proc, rows = _update(fleet, rel, server.url, base / "r2.json", "--serial", "4", "--max-fail-percentage", "100",
                         "--limit", names)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert {n: r["changed"] for n, r in rows.items()} == dict.fromkeys(names.split(","), 0), rows
    assert server.since(mark) == []
    assert rows["good-8275"]["details"]["update_os"]["outcome"] == "up-to-date"
    for n in ("badnpu-8275", "noboot-8275"):
        assert "was rolled back on this board before" in rows[n]["reason"], rows[n]
    assert {n: (_status(fleet.boards[n]), _entries(fleet.boards[n])) for n in names.split(",")} == before


def _kill_at(fleet, rel, url, base, name, mark_text):
    log = base / f"killed-{name}.log"
    argv = [sys.executable, "-m", "provisioner", "fleet", "update-os", "-i", str(fleet.inventory), "--release",
            str(rel), "--repo", url, "--limit", name, "--log", str(log)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline and proc.poll() is None:
        if log.is_file() and mark_text in log.read_text(errors="replace"):
            os.killpg(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.05)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, f"{mark_text!r} never logged"
    b = fleet.boards[name]
    deadline = time.monotonic() + 120
    time.sleep(1)
    while time.monotonic() < deadline and subprocess.run(
            ["pgrep", "-f", f"ostree_board reboot {b.root} {b.serial}"], capture_output=True).returncode == 0:
        time.sleep(0.2)
    while time.monotonic() < deadline:
        try:
            if _ssh(b, "true").returncode == 0:
                return
        except SimError:                 # between the power-cycle's stop and start: no address yet
            pass
        time.sleep(0.5)
    log = b.dir / "host" / "reboot.log"
    raise AssertionError(f"{name} never came back: {log.read_text() if log.is_file() else 'no reboot.log'}")


@pytest.mark.parametrize(("name", "mark_text", "verdict", "on"), [
    ("killstage-8275", "Stage the release", "pass", "c2"),
    ("killgate-8275", "Health gate - booted", "pass", "c2"),
    ("killrb-8275", "Reboot into the previous deployment", "fail", "c1"),
])
def test_a_controller_killed_at_a_step_converges_on_rerun(sota, name, mark_text, verdict, on):
    fleet, base, server, c1, c2, rel = sota
    _kill_at(fleet, rel, server.url, base, name, mark_text)
    proc, rows = _update(fleet, rel, server.url, base / f"r-{name}.json", "--limit", name)
    assert rows[name]["verdict"] == verdict, rows[name]
    want = {"c1": c1, "c2": c2}[on]
    b = fleet.boards[name]
    assert _status(b)[0] == f"* nodistro {want}.0"
    if on == "c1":
        assert _status(b) == [f"* nodistro {c1}.0"] and "rolled back" in rows[name]["reason"]
    proc, rows = _update(fleet, rel, server.url, base / f"r-{name}-2.json", "--limit", name)
    assert rows[name]["changed"] == 0, rows[name]


def test_sim_down_leaves_nothing_rm_rf_cannot_remove(tmp_path):
    """Defect 9: ostree sets the immutable bit on each deployment; `sim down` clears it, so the folder goes."""
    fleet = build_fleet(tmp_path / "sim", [BoardSpec("one-8275", "iq-8275-evk", vars=of.SIM_VARS)],
                        cache=tmp_path / "cache")
    rel, c1 = of.build_release(tmp_path, "base-1", of.image_tree(fleet.rootfs("one-8275"), tmp_path, "base-1"))
    of.make_ota_boards(fleet, tmp_path / "build" / "ostree_repo", c1)
    assert "-i-" in subprocess.run(["lsattr", "-d", *map(str, (ostree_board.sysroot(fleet.boards["one-8275"]) /
                                                              "ostree/deploy/nodistro/deploy").glob("*.0"))],
                                   capture_output=True, text=True).stdout
    proc = subprocess.run([sys.executable, "-m", "provisioner", "sim", "down", "--root", str(fleet.root)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    shutil.rmtree(tmp_path)          # raises PermissionError (EPERM) on an immutable deployment
