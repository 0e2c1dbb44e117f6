"""Virtual-board hosts over real ssh: the namespace shows the board, services run, teardown is clean."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from provisioner.sim import control, host
from tests.sim.test_host_support import make_board, needs_root, ssh

pytestmark = [needs_root, pytest.mark.root]

SLEEPER = "#!/bin/sh\n# test stand-in for the inference service\nexec sleep 600\n"


@pytest.fixture(scope="module")
def board(module_boards):
    return module_boards.start(serve_script=SLEEPER)


def test_namespace_presents_the_board_at_real_paths(board):
    out = ssh(board, "cat /sys/devices/soc0/machine /sys/devices/soc0/soc_id; "
                     "tr '\\0' '\\n' < /sys/firmware/devicetree/base/compatible; "
                     ". /etc/os-release; echo BUILD_ID=$BUILD_ID; cat /proc/cmdline; "
                     "stat -c '%F %a %U %G' /dev/fastrpc-cdsp; test -e /usr/lib/libcdsprpc.so && echo lib-ok")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[:4] == ["QCS8275", "675", "qcom,monaco-evk", "qcom,qcs8300"]
    assert f"BUILD_ID={board.reload().build_id}" in lines
    assert "qcom_scm.download_mode=0" in out.stdout
    assert "character special file 660 fastrpc fastrpc" in out.stdout
    assert "lib-ok" in lines
    # nothing leaked to the host
    assert not Path("/dev/fastrpc-cdsp").exists()
    assert not Path("/sys/devices/soc0/machine").exists()


def test_root_logs_in_to_the_boards_own_home_with_a_pty(board):
    """root's home is the board's /root, not the host's (whose ~/.bashrc bash would source for every
    command sshd runs); a pty can be had (Ansible's reboot module runs ssh -tt)."""
    out = ssh(board, "echo HOME=$HOME; touch /root/.board-marker; ls -A /root")
    assert out.returncode == 0, out.stderr
    home = board.rootfs_dir / "root"
    assert out.stdout.splitlines() == ["HOME=/root", *sorted(os.listdir(home))]
    assert (home / ".board-marker").is_file() and not Path("/root/.board-marker").exists()
    tty = subprocess.run([*host.ssh_argv(board, "tty")[:1], "-tt", *host.ssh_argv(board, "tty")[1:]],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert tty.returncode == 0 and tty.stdout.strip().startswith("/dev/pts/"), tty.stdout + tty.stderr


@pytest.mark.parametrize(("by_name", "off", "full"), [(False, "0", "1"), (True, "off", "full")])
def test_download_mode_is_one_value_for_ssh_and_console(tmp_path, monkeypatch, by_name, off, full):
    # the sim root's supervisor keeps the board's sysfs and board.json (what the console reads) in step;
    # a kernel that names the modes (Linux qcom_scm.c download_mode_name[]) still takes "echo 1" and
    # then reads back "full"
    monkeypatch.setenv("PROVISIONER_SIM_BOOT_SCALE", "0")
    root = tmp_path / "sim"
    try:
        (vb,) = control.up(1, "iq-8275-evk", root=root, timeout_s=120).boards
        vb.update(qcom_scm_names=by_name)
        assert ssh(vb, "echo 1 > /sys/module/qcom_scm/parameters/download_mode").returncode == 0
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and vb.reload().download_mode != 1:
            time.sleep(0.1)
        assert vb.download_mode == 1
        deadline = time.monotonic() + 5
        seen = ""
        while time.monotonic() < deadline and seen != full:
            seen = ssh(vb, "cat /sys/module/qcom_scm/parameters/download_mode").stdout.strip()
        assert seen == full
        vb.update(download_mode=0)           # what the serial console does; the board's sysfs follows
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and seen != off:
            seen = ssh(vb, "cat /sys/module/qcom_scm/parameters/download_mode").stdout.strip()
        assert seen == off
    finally:
        control.down(root)


def _agent(vb) -> dict:
    return json.loads((host.host_dir(vb) / "agent.json").read_text())


def test_ssh_socket_is_restarted_if_it_dies(board):
    before = _agent(board)
    os.kill(before["listener"], signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _agent(board)["listener"] == before["listener"]:
        time.sleep(0.05)
    after = _agent(board)
    assert after["listener"] != before["listener"] and after["pid"] == before["pid"]
    out = subprocess.CompletedProcess([], 255)
    while time.monotonic() < deadline and out.returncode != 0:
        out = ssh(board, "cat /sys/devices/soc0/machine")
    assert out.returncode == 0 and out.stdout.strip() == "QCS8275", out.stderr


def _sshd_in_namespace(vb) -> list[int]:
    """sshd processes inside the board's mount namespace."""
    mntns = _agent(vb)["mntns"]
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                same_ns = os.stat(f"/proc/{d}/ns/mnt").st_ino == mntns
                if same_ns and Path(f"/proc/{d}/comm").read_text().strip() == "sshd":
                    out.append(int(d))
            except OSError:
                continue
    return out


def _idle_without_sshd(vb) -> list[int]:
    """Wait (bounded) for the last connection's sshd to exit; what is left is what idles."""
    deadline = time.monotonic() + 10
    while (left := _sshd_in_namespace(vb)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def test_idle_board_runs_no_sshd_and_each_connection_gets_one(boards):
    """Socket-activated sshd, as a QLI image runs it (sshd.socket, Accept=yes): nothing but the
    socket while nobody is connected; a connection gets its own sshd in the board's namespace,
    twice in a row and again after the board was power-cycled, on the same port and host key."""
    vb = boards.start(serve_script=SLEEPER)
    port = vb.reload().ssh["port"]
    assert _idle_without_sshd(vb) == []
    for _ in range(2):
        out = ssh(vb, "cat /sys/devices/soc0/machine; cat /proc/$PPID/comm")
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == ["QCS8275", "sshd"]        # the session's parent is the board's sshd
        assert _idle_without_sshd(vb) == []
    host.stop_host(vb)
    host.start_host(vb)
    assert vb.reload().ssh["port"] == port
    assert _idle_without_sshd(vb) == []
    out = ssh(vb, "cat /sys/devices/soc0/machine")       # StrictHostKeyChecking=yes: the same host key
    assert out.returncode == 0 and out.stdout.strip() == "QCS8275", out.stderr
    assert _idle_without_sshd(vb) == []


def test_orphans_on_the_board_are_adopted_and_reaped(board):
    # a daemon left behind by an ssh session belongs to the board (not the host's init) and leaves no zombie
    out = ssh(board, "sleep 1 </dev/null >/dev/null 2>&1 & echo $!")
    pid = int(out.stdout.strip())
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    assert int(stat[1]) == _agent(board)["pid"]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        time.sleep(0.05)
    assert not Path(f"/proc/{pid}").exists()


def test_enabled_service_starts_at_boot_and_gets_sigterm_at_shutdown(boards):
    vb = boards.start()
    script = vb.rootfs_dir / "opt/graceful.sh"
    script.write_text("#!/bin/sh\n# test service: says when it starts and when it is asked to stop\n"
                      "echo started >> /opt/graceful.log\n"
                      "trap 'echo term >> /opt/graceful.log; exit 0' TERM\n"
                      "while :; do sleep 0.05; done\n")
    script.chmod(0o755)
    (vb.rootfs_dir / "etc/systemd/system/graceful.service").write_text(
        "[Unit]\nDescription=graceful test service\n[Service]\nExecStart=/opt/graceful.sh\n"
        "[Install]\nWantedBy=multi-user.target\n")
    assert ssh(vb, "systemctl enable graceful").returncode == 0
    host.stop_host(vb)
    host.start_host(vb)                       # a reboot: the board's init starts what is enabled
    assert ssh(vb, "systemctl is-active graceful").stdout.strip() == "active"
    host.stop_host(vb)
    assert (vb.rootfs_dir / "opt/graceful.log").read_text().split() == ["started", "term"]


def test_session_memlock_follows_limits_d(board):
    # the image's limits file raises root's limit; a session without it gets QLI's 8192 KiB
    out = ssh(board, "python3 -c 'import sys; sys.path.insert(0, \"/run/edge-llm-sim/src\"); "
                     "from provisioner.sim.limits import effective_memlock as m; print(m())'; "
                     "mv /etc/security/limits.d/50-edge-llm-memlock.conf /tmp/.lim.$$ && "
                     "python3 -c 'import sys; sys.path.insert(0, \"/run/edge-llm-sim/src\"); "
                     "from provisioner.sim.limits import effective_memlock as m; print(m())'")
    ssh(board, "true")  # new login re-reads limits.d
    moved = ssh(board, "python3 -c 'import sys; sys.path.insert(0, \"/run/edge-llm-sim/src\"); "
                       "from provisioner.sim.limits import effective_memlock as m; print(m())'")
    ssh(board, "mv /tmp/.lim.* /etc/security/limits.d/50-edge-llm-memlock.conf")
    assert out.stdout.split()[0] == "-1"              # unlimited (RLIM_INFINITY)
    assert moved.stdout.strip() == str(8192 * 1024)


def test_systemctl_stand_in_with_real_ansible(host_root, board, tmp_path):
    inv = host.write_inventory(host_root, tmp_path / "inventory.yml")
    play = tmp_path / "play.yml"
    play.write_text(textwrap.dedent("""\
        - hosts: boards
          gather_facts: false
          tasks:
            - name: Serve the model
              ansible.builtin.systemd:
                name: edge-llm-serve@gemma-4-e2b.service
                state: started
                enabled: true
                daemon_reload: true
              register: svc
            - name: FastRPC daemon is up
              ansible.builtin.systemd:
                name: cdsprpcd.service
                state: started
              register: rpc
            - ansible.builtin.assert:
                that:
                  - svc.status.LimitMEMLOCK == 'infinity'
                  - rpc is not changed
    """))
    env = dict(os.environ, ANSIBLE_HOST_KEY_CHECKING="True", ANSIBLE_NOCOLOR="1", ANSIBLE_RETRY_FILES_ENABLED="0",
               ANSIBLE_PIPELINING="1")
    res = subprocess.run(["ansible-playbook", "-i", str(inv), str(play)], capture_output=True, text=True, env=env,
                         timeout=120)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert "changed=1" in res.stdout
    out = ssh(board, "systemctl show -p MainPID --value edge-llm-serve@gemma-4-e2b; "
                     "systemctl is-enabled edge-llm-serve@gemma-4-e2b; systemctl is-active cdsprpcd")
    pid, enabled, rpc = out.stdout.split()
    assert enabled == "enabled" and rpc == "active"
    status = ssh(board, f"cat /proc/{pid}/status; tr '\\0' ' ' < /proc/{pid}/environ").stdout
    uid = next(ln.split()[1] for ln in status.splitlines() if ln.startswith("Uid:"))
    groups = next(ln.split(":", 1)[1].split() for ln in status.splitlines() if ln.startswith("Groups:"))
    assert ssh(board, f"getent passwd {uid} | cut -d: -f1").stdout.strip() == "llm"
    assert ssh(board, "getent group fastrpc | cut -d: -f3").stdout.strip() in groups
    assert "EDGE_LLM_SIM_MEMLOCK=-1" in status or "unlimited" in ssh(board, f"grep locked /proc/{pid}/limits").stdout
    # enable wrote the real wants symlink into the board's rootfs (survives a reboot)
    link = board.rootfs_dir / "etc/systemd/system/multi-user.target.wants/edge-llm-serve@gemma-4-e2b.service"
    assert link.is_symlink()
    # and a second run changes nothing
    res2 = subprocess.run(["ansible-playbook", "-i", str(inv), str(play)], capture_output=True, text=True, env=env,
                          timeout=120)
    assert res2.returncode == 0 and "changed=0" in res2.stdout, res2.stdout[-2000:]


def test_service_restarts_on_failure_then_gives_up(board):
    unit = board.rootfs_dir / "etc/systemd/system/flaky.service"
    unit.write_text("[Service]\nExecStart=/bin/sh -c 'exit 3'\nRestart=on-failure\nRestartSec=0.05\n")
    ssh(board, "systemctl start flaky")
    deadline = time.monotonic() + 10
    state = ""
    while time.monotonic() < deadline:
        state = ssh(board, "systemctl show -p ActiveState -p Result -p NRestarts flaky").stdout
        if "ActiveState=failed" in state:
            break
        time.sleep(0.2)
    assert "ActiveState=failed" in state and "Result=start-limit-hit" in state
    assert int(state.split("NRestarts=")[1].split()[0]) >= 4
    assert ssh(board, "systemctl is-active flaky").returncode == 3


def test_unreachable_board_refuses_connections(boards):
    vb = boards.start(faults=("unreachable",))
    h, port = vb.ssh["host"], vb.ssh["port"]
    with socket.socket() as s:
        s.settimeout(2)
        assert s.connect_ex((h, port)) != 0
    assert vb.reload().ssh == {"host": h, "port": port}


def test_account_changes_survive_a_reboot(boards):
    vb = boards.start(faults=("no-fastrpc-group",))
    assert "fastrpc" not in ssh(vb, "id -nG llm").stdout
    assert ssh(vb, "usermod -aG fastrpc llm").returncode == 0
    host.stop_host(vb)
    host.start_host(vb)
    assert "fastrpc" in ssh(vb, "id -nG llm").stdout.split()


def _sshd_for(vb) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                cmd = Path(f"/proc/{d}/cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if str(vb.dir) in cmd:
                out.append(int(d))
    return out


def test_stop_leaves_nothing_behind_even_if_the_starter_was_killed(host_root):
    root = host_root
    vb = make_board(root, serve_script=SLEEPER)
    # start from a separate process that is then killed, like a CLI hit by SIGKILL
    code = (f"from provisioner.sim.board import VirtualBoard; from provisioner.sim import host; import time\n"
            f"host.start_host(VirtualBoard.load({str(root)!r}, {vb.serial!r})); print('up', flush=True); "
            f"time.sleep(60)")
    starter = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert starter.stdout.readline().strip() == "up"
    starter.send_signal(signal.SIGKILL)
    starter.wait()
    vb.reload()
    assert ssh(vb, "systemctl start edge-llm-serve@gemma-4-e2b && systemctl is-active edge-llm-serve@gemma-4-e2b"
               ).stdout.strip() == "active"
    info = json.loads((host.host_dir(vb) / "agent.json").read_text())
    os.kill(info["pid"], signal.SIGKILL)          # even the agent dies uncleanly
    host.stop_host(vb)
    port = int((host.host_dir(vb) / "port").read_text())
    with socket.socket() as s:
        s.settimeout(1)
        assert s.connect_ex(("127.0.0.1", port)) != 0
    assert _sshd_for(vb) == []
    assert not any(
        os.stat(f"/proc/{d}/ns/mnt").st_ino == info["mntns"] for d in os.listdir("/proc")
        if d.isdigit() and os.path.exists(f"/proc/{d}/ns/mnt"))
    assert vb.reload().ssh is None
    mounts = Path("/proc/self/mountinfo").read_text()
    assert str(vb.dir) not in mounts


def test_stopping_a_board_never_kills_another_board_that_got_its_namespace_number(boards):
    """The kernel hands a freed mount namespace's inode number to the next namespace. A board whose
    agent died long ago still has that number on record; stopping it must not kill whichever board's
    namespace carries the number now (seen as a fleet-size start failing with `exit -9`)."""
    gone = boards.start(serve_script=SLEEPER)
    alive = boards.start(serve_script=SLEEPER)
    info = json.loads((host.host_dir(gone) / "agent.json").read_text())
    host.stop_host(gone)                                  # gone's namespace is freed
    theirs = json.loads((host.host_dir(alive) / "agent.json").read_text())["mntns"]
    stale = {**info, "mntns": theirs}                     # the number gone had, now alive's
    (host.host_dir(gone) / "agent.json").write_text(json.dumps(stale))
    host.stop_host(gone)
    out = ssh(alive, "cat /sys/devices/soc0/machine")
    assert out.returncode == 0 and out.stdout.strip() == "QCS8275", out.stderr
    assert host.host_running(alive)
