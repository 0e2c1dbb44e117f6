"""Socket units in the virtual boards' stand-in systemd (provisioner.sim.systemctl), driven over real ssh.

The pair under test mirrors the inference service's: an instance-named ``probe@<x>.socket`` file next to a
``probe@.service`` template. The service is a tiny Python program (not edge-llm-serve) that answers each
connection with one JSON line saying what it was handed: LISTEN_PID, LISTEN_FDS, LISTEN_FDNAMES, the
inode of each passed fd, its pid and uid. Without passed fds it binds the port itself, as a service
launched before socket units does.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from provisioner.sim import host, ports
from provisioner.sim.unit_files import parse_listen_stream
from tests.sim.test_host_support import needs_root, ssh

SLEEPER = "#!/bin/sh\n# test stand-in for the inference service\nexec sleep 600\n"

PROBE = r'''# socket-activation probe for tests/sim/test_socket_units.py
import json, os, selectors, socket, sys
n = int(os.environ.get("LISTEN_FDS", "0")) if os.environ.get("LISTEN_PID") == str(os.getpid()) else 0
info = {"pid": os.getpid(), "uid": os.getuid(), "listen_pid": os.environ.get("LISTEN_PID"), "listen_fds": n,
        "names": os.environ.get("LISTEN_FDNAMES"), "inodes": [os.fstat(3 + i).st_ino for i in range(n)],
        "open_fds": sorted(int(f) for f in os.listdir("/proc/self/fd"))}
socks = [socket.socket(fileno=3 + i) for i in range(n)]
if not socks:
    socks = [socket.create_server(("127.0.0.1", int(sys.argv[1])))]
sel = selectors.DefaultSelector()
for s in socks:
    sel.register(s, selectors.EVENT_READ)
while True:
    for key, _ in sel.select():
        conn, _ = key.fileobj.accept()
        with conn:
            conn.sendall(json.dumps(info).encode() + b"\n")
'''

SERVICE = """[Unit]
Description=socket-activation probe %i
[Service]
User=llm
ExecStart=/run/edge-llm-sim/python3 -S /opt/probe.py %i
Restart=on-failure
RestartSec=2
[Install]
WantedBy=multi-user.target
"""

HAS_IPV6 = Path("/proc/net/if_inet6").exists()
# the unprivileged user's interpreter: pytest's may live under root's home, which nobody cannot enter
WORLD_PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def board_test(fn):
    return pytest.mark.root(needs_root(fn))


@pytest.fixture(scope="module")
def board(module_boards):
    vb = module_boards.start(serve_script=SLEEPER)
    (vb.rootfs_dir / "opt/probe.py").write_text(PROBE)
    (vb.rootfs_dir / "etc/systemd/system/probe@.service").write_text(SERVICE)
    return vb


@pytest.fixture
def pair(board):
    """``pair(n, *listen)`` writes ``probe@<port>.socket`` listening on ``listen`` (default 127.0.0.1:port,
    port = the board's port block + n) and returns (port, socket unit, service unit); both are stopped and
    the socket file removed when the test ends."""
    made: list[str] = []

    def make(n: int, *listen: str) -> tuple[int, str, str]:
        port = ports.serve_port_base(board) + n
        name = f"probe@{port}"
        lines = "".join(f"ListenStream={a.format(port=port)}\n" for a in listen or ("127.0.0.1:{port}",))
        (board.rootfs_dir / f"etc/systemd/system/{name}.socket").write_text(
            f"[Unit]\nDescription=probe socket {port}\n[Socket]\n{lines}NoDelay=true\n"
            "[Install]\nWantedBy=sockets.target\n")
        made.append(name)
        return port, f"{name}.socket", f"{name}.service"

    yield make
    for name in made:
        ssh(board, f"systemctl disable {name}.socket; systemctl stop {name}.socket {name}.service")
        (board.rootfs_dir / f"etc/systemd/system/{name}.socket").unlink(missing_ok=True)
        shutil.rmtree(board.rootfs_dir / f"etc/systemd/system/{name}.service.d", ignore_errors=True)


def show(vb, unit: str, *props: str) -> dict[str, str]:
    out = ssh(vb, f"systemctl show -p {','.join(props)} {unit}")
    assert out.returncode == 0, out.stderr
    return dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)


def ask(port: int, host_: str = "127.0.0.1", timeout: float = 20) -> dict:
    """Connect and read the probe's JSON line (the connection may wait in the backlog for the service)."""
    with socket.create_connection((host_, port), timeout=timeout) as c:
        data = b""
        while not data.endswith(b"\n"):
            chunk = c.recv(4096)
            if not chunk:
                break
            data += chunk
    return json.loads(data)


def bind_as_nobody(port: int, host_: str = "127.0.0.1") -> int:
    """errno of an unprivileged local user's bind+listen on ``port`` (0: it got the port), trying what such
    a user would: SO_REUSEADDR (past TIME_WAIT) and SO_REUSEPORT (sharing with a willing socket)."""
    code = ("import errno, socket, sys\n"
            f"s = socket.socket(socket.AF_INET6 if ':' in {host_!r} else socket.AF_INET)\n"
            "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
            "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)\n"
            f"try:\n    s.bind(({host_!r}, {port})); s.listen()\nexcept OSError as e:\n    sys.exit(e.errno)\n")
    return subprocess.run([WORLD_PYTHON, "-c", code], user=65534, group=65534, extra_groups=[],
                          timeout=30).returncode


def listening_inodes(port: int) -> set[int]:
    """Inodes of the sockets listening on ``port`` (state 0A in /proc/net/tcp and tcp6)."""
    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if int(f[1].rsplit(":", 1)[1], 16) == port and f[3] == "0A":
                out.add(int(f[9]))
    return out


def holder_inodes(vb, sock_unit: str) -> set[int]:
    """Socket inodes the unit's holder process has open (its pid is in the stand-in's state file)."""
    st = json.loads(ssh(vb, f"cat /run/edge-llm-sim/systemd/{sock_unit}.json").stdout)
    pid = int(st["runner_pid"])
    out = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with_target = os.readlink(f"/proc/{pid}/fd/{fd}")
        if with_target.startswith("socket:["):
            out.add(int(with_target[8:-1]))
    return out


def wait_for(pred, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return False


def test_listen_stream_forms():
    """systemd.socket(5) ListenStream=: a bare port is IPv6 (dual-stack) when the kernel has IPv6."""
    bare = parse_listen_stream("8080")
    assert (bare.family, bare.host, bare.port) == ((socket.AF_INET6, "::", 8080) if HAS_IPV6
                                                   else (socket.AF_INET, "0.0.0.0", 8080))
    assert (parse_listen_stream("127.0.0.1:8080").family, parse_listen_stream("0.0.0.0:8080").host) == \
        (socket.AF_INET, "0.0.0.0")
    assert (parse_listen_stream("[::1]:8080").family, parse_listen_stream("[::]:8080").host) == (socket.AF_INET6, "::")
    for bad in ("8080x", "127.0.0.1:0", "127.0.0.1:70000", "/run/probe.sock", "[::1]8080", "300.1.1.1:80"):
        with pytest.raises(ValueError):
            parse_listen_stream(bad)


@board_test
def test_service_gets_the_sockets_the_holder_listens_on(board, pair):
    listen = ("127.0.0.1:{port}", "[::1]:{port}") if HAS_IPV6 else ("127.0.0.1:{port}",)
    port, sock_unit, svc = pair(1, *listen)
    assert ssh(board, f"systemctl start {sock_unit}").returncode == 0
    assert show(board, sock_unit, "ActiveState", "SubState", "UnitFileState", "MainPID", "Triggers") == {
        "ActiveState": "active", "SubState": "listening", "UnitFileState": "disabled", "MainPID": "0",
        "Triggers": svc}
    assert ssh(board, f"systemctl start {svc}").returncode == 0
    info = ask(port)
    assert info["pid"] == int(show(board, svc, "MainPID")["MainPID"])
    assert info["listen_pid"] == str(info["pid"]) and info["listen_fds"] == len(listen)
    assert info["names"] == ":".join([sock_unit] * len(listen))
    # fds 3, 4, ... and nothing else past stderr (the last one is the probe's own listdir)
    assert info["open_fds"] == list(range(3 + len(listen) + 1))
    assert info["uid"] != 0                                                     # User=llm: root bound, llm serves
    # the very sockets the holder listens on: one listener per address, in the holder and in the service
    assert set(info["inodes"]) == listening_inodes(port)
    assert listening_inodes(port) <= holder_inodes(board, sock_unit)
    assert show(board, sock_unit, "SubState")["SubState"] == "running"
    if HAS_IPV6:
        assert ask(port, "::1")["pid"] == info["pid"]


@board_test
def test_the_port_stays_held_while_the_service_restarts_or_stops(board, pair):
    port, sock_unit, svc = pair(2)
    dropin = board.rootfs_dir / f"etc/systemd/system/{svc}.d"
    dropin.mkdir()
    (dropin / "slow-restart.conf").write_text("[Service]\nRestartSec=4\n")   # a wide window, even on a busy CI
    assert ssh(board, f"systemctl start {sock_unit} && systemctl start {svc}").returncode == 0
    first = ask(port)
    ino = first["inodes"]
    os.kill(first["pid"], signal.SIGKILL)                  # a crash: Restart=on-failure
    assert wait_for(lambda: not Path(f"/proc/{first['pid']}").exists(), 5)
    assert bind_as_nobody(port) == 98                      # EADDRINUSE: the manager holds the port meanwhile
    assert show(board, svc, "SubState")["SubState"] == "auto-restart"      # ... and that was in the restart wait
    assert show(board, sock_unit, "ActiveState")["ActiveState"] == "active"
    second = ask(port)                                     # waits in the backlog for the restarted service
    assert second["pid"] != first["pid"] and second["inodes"] == ino
    assert show(board, svc, "NRestarts")["NRestarts"] == "1"
    stop = ssh(board, f"systemctl stop {svc}")
    assert stop.returncode == 0
    assert f"Stopping '{svc}', but its triggering units are still active:\n{sock_unit}" in stop.stderr
    assert show(board, svc, "ActiveState")["ActiveState"] == "inactive"
    assert bind_as_nobody(port) == 98
    assert ssh(board, f"systemctl restart {svc}").returncode == 0
    third = ask(port)
    assert third["pid"] not in (first["pid"], second["pid"]) and third["inodes"] == ino


@board_test
def test_a_connection_starts_the_inactive_service(board, pair):
    port, sock_unit, svc = pair(3)
    assert ssh(board, f"systemctl start {sock_unit}").returncode == 0
    assert show(board, svc, "ActiveState")["ActiveState"] == "inactive"
    info = ask(port)                                       # Accept=no: the connection starts the service
    assert info["listen_fds"] == 1 and info["listen_pid"] == str(info["pid"])
    assert show(board, svc, "ActiveState", "MainPID") == {"ActiveState": "active", "MainPID": str(info["pid"])}
    assert ask(port)["pid"] == info["pid"]                 # one service for all connections
    # a failed service (no Restart= for this instance) is started again by the next connection too
    dropin = board.rootfs_dir / f"etc/systemd/system/{svc}.d"
    dropin.mkdir()
    (dropin / "no-restart.conf").write_text("[Service]\nRestart=no\n")
    assert ssh(board, f"systemctl daemon-reload && systemctl restart {svc}").returncode == 0
    crashed = ask(port)
    os.kill(crashed["pid"], signal.SIGKILL)
    assert wait_for(lambda: show(board, svc, "ActiveState")["ActiveState"] == "failed")
    again = ask(port)
    assert again["pid"] != crashed["pid"] and again["listen_fds"] == 1
    assert show(board, svc, "ActiveState", "MainPID") == {"ActiveState": "active", "MainPID": str(again["pid"])}


@board_test
def test_stopping_the_socket_frees_the_port(board, pair):
    port, sock_unit, svc = pair(4)
    assert ssh(board, f"systemctl start {sock_unit}").returncode == 0
    assert bind_as_nobody(port) == 98
    assert ssh(board, f"systemctl stop {sock_unit}").returncode == 0
    assert show(board, sock_unit, "ActiveState", "SubState") == {"ActiveState": "inactive", "SubState": "dead"}
    assert bind_as_nobody(port) == 0 and listening_inodes(port) == set()
    # stopped under a running service: the service keeps the sockets it was given, and frees them on stop
    assert ssh(board, f"systemctl start {sock_unit} && systemctl start {svc}").returncode == 0
    served = ask(port)
    assert ssh(board, f"systemctl stop {sock_unit}").returncode == 0
    assert show(board, svc, "ActiveState")["ActiveState"] == "active"
    assert ask(port)["pid"] == served["pid"]
    assert ssh(board, f"systemctl stop {svc}").returncode == 0
    assert bind_as_nobody(port) == 0


@board_test
def test_a_socket_start_fails_on_a_taken_port_or_beside_its_running_service(board, pair):
    port, sock_unit, svc = pair(5)
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("127.0.0.1", port))
        taken.listen()
        out = ssh(board, f"systemctl start {sock_unit}")
        assert out.returncode != 0 and f"Job for {sock_unit} failed." in out.stderr
        assert show(board, sock_unit, "ActiveState", "Result") == {"ActiveState": "failed", "Result": "resources"}
        status = ssh(board, f"systemctl status {sock_unit}").stdout
        assert "Failed to create listening socket (127.0.0.1:" in status and "Address already in use" in status
    assert ssh(board, f"systemctl start {sock_unit}").returncode == 0      # the port is free again
    assert ssh(board, f"systemctl stop {sock_unit}").returncode == 0
    # a service that still binds the port itself (launched before socket units) keeps the socket from
    # starting, as systemd refuses: "Socket service ... already active, refusing."
    assert ssh(board, f"systemctl start {svc}").returncode == 0
    assert wait_for(lambda: bool(listening_inodes(port)))  # the probe binds by itself once python is up
    assert ask(port)["listen_fds"] == 0
    out = ssh(board, f"systemctl start {sock_unit}")
    assert out.returncode != 0
    assert f"Socket service {svc} already active, refusing." in ssh(board, f"systemctl status {sock_unit}").stdout
    assert show(board, sock_unit, "ActiveState")["ActiveState"] == "inactive"


@board_test
def test_a_changed_listen_stream_takes_effect_at_the_socket_restart(board, pair):
    port, sock_unit, _svc = pair(6)
    assert ssh(board, f"systemctl start {sock_unit}").returncode == 0
    unit = board.rootfs_dir / f"etc/systemd/system/{sock_unit}"
    unit.write_text(unit.read_text().replace(f"127.0.0.1:{port}", f"127.0.0.1:{port + 1}"))
    assert ssh(board, "systemctl daemon-reload").returncode == 0
    assert listening_inodes(port) and not listening_inodes(port + 1)        # the running socket keeps its fds
    assert ssh(board, f"systemctl restart {sock_unit}").returncode == 0
    assert listening_inodes(port + 1) and not listening_inodes(port)
    assert ask(port + 1)["listen_fds"] == 1


@board_test
def test_an_enabled_socket_listens_from_boot(board, pair):
    port, sock_unit, svc = pair(8)
    out = ssh(board, f"systemctl enable {sock_unit} && systemctl is-enabled {sock_unit}")
    assert out.returncode == 0 and out.stdout.split() == ["enabled"]
    link = board.rootfs_dir / f"etc/systemd/system/sockets.target.wants/{sock_unit}"
    assert link.is_symlink()
    assert sock_unit in ssh(board, "systemctl list-unit-files").stdout
    host.stop_host(board)
    host.start_host(board)                                  # a reboot: the socket listens before any service
    assert ssh(board, f"systemctl is-active {sock_unit}").stdout.strip() == "active"
    units = ssh(board, "systemctl list-units").stdout
    assert f"{sock_unit} loaded active listening" in units
    assert sock_unit not in ssh(board, "systemctl list-units --type=service").stdout
    assert show(board, svc, "ActiveState")["ActiveState"] == "inactive"
    assert bind_as_nobody(port) == 98
    assert ask(port)["listen_fds"] == 1
    assert ssh(board, f"systemctl disable {sock_unit}").returncode == 0
    assert not link.is_symlink() and not link.exists()
