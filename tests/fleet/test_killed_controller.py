"""A controller killed with -9 leaves no ansible-playbook behind to go on with the play.

ansible-playbook runs in a session of its own (so Ctrl-C reaches it through the runner, not the terminal);
without more, a SIGKILL of the CLI would leave it running its play, racing a rerun on the same boards. It
dies with the controller; the task already under way on a board finishes there and its worker exits.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


def ansible_of(inventory: Path) -> dict[int, int]:
    """pid -> parent pid of the ansible-playbook processes (main and workers) running on ``inventory``."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if any(b"ansible-playbook" in c for c in cmd) and str(inventory).encode() in cmd:
            found[int(entry)] = ppid
    return found


def wait_until(cond, timeout_s: float = 30) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.1)
    return cond()


def test_killing_the_cli_ends_the_play(tmp_path):
    silent = socket.create_server(("127.0.0.1", 0))   # accepts, never says a word: the task's ssh waits on it
    silent.settimeout(120)
    inv = tmp_path / "inventory.yml"
    inv.write_text(json.dumps({"all": {"children": {"iq_8275_evk": {"hosts": {"b1": {
        "ansible_host": "127.0.0.1", "ansible_port": silent.getsockname()[1],
        "ansible_ssh_common_args": "-o StrictHostKeyChecking=no"}}}}}}))
    # ANSIBLE_TIMEOUT: the task waits on the silent board far longer than this test looks (ansible's own
    # connection timeout would otherwise end it, and the run with it, after 10 s)
    cli = subprocess.Popen([sys.executable, "-m", "provisioner", "fleet", "verify", "-i", str(inv)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                           env={**os.environ, "ANSIBLE_TIMEOUT": "300"})
    board_side = None
    try:
        board_side, _ = silent.accept()                # a task is under way: its ssh reached the "board"
        main = [pid for pid, ppid in ansible_of(inv).items() if ppid == cli.pid]
        assert main, "the CLI's ansible-playbook is not running"
        os.killpg(cli.pid, signal.SIGKILL)
        cli.wait(30)
        assert wait_until(lambda: main[0] not in ansible_of(inv)), "ansible-playbook outlived the controller"
        board_side.close()                             # the task under way ends ...
        assert wait_until(lambda: not ansible_of(inv)), ansible_of(inv)     # ... and its worker exits
        silent.settimeout(2)
        try:
            again, _ = silent.accept()                 # no later task (nor a retry of this one) reached the board
            again.close()
            raise AssertionError("a task started after the controller died")
        except TimeoutError:
            pass
    finally:
        for pid in ansible_of(inv):
            os.kill(pid, signal.SIGKILL)
        silent.close()
        if board_side is not None:
            board_side.close()
