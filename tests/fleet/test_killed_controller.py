"""A controller killed with -9 leaves no ansible-playbook behind to go on changing boards.

ansible-playbook runs in its own session (so Ctrl-C reaches it through the runner, not the terminal); without
more, a SIGKILL of the CLI would leave it running, and a rerun would race the leftover run on the same boards.
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


def ansible_of(inventory: Path) -> list[int]:
    """Pids of ansible-playbook processes running on ``inventory``."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(b"ansible-playbook" in c for c in cmd) and str(inventory).encode() in cmd:
            pids.append(int(entry))
    return pids


def test_killing_the_cli_takes_ansible_playbook_with_it(tmp_path):
    silent = socket.create_server(("127.0.0.1", 0))   # accepts, never says a word: ssh waits on it
    inv = tmp_path / "inventory.yml"
    inv.write_text(json.dumps({"all": {"children": {"iq_8275_evk": {"hosts": {"b1": {
        "ansible_host": "127.0.0.1", "ansible_port": silent.getsockname()[1],
        "ansible_ssh_common_args": "-o ConnectTimeout=120 -o StrictHostKeyChecking=no"}}}}}}))
    cli = subprocess.Popen([sys.executable, "-m", "provisioner", "fleet", "verify", "-i", str(inv)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        silent.settimeout(120)
        board_side, _ = silent.accept()                # a task is under way: its ssh reached the "board"
        time.sleep(1)                                  # past the task's first output line
        assert ansible_of(inv), "ansible-playbook is not running"
        os.killpg(cli.pid, signal.SIGKILL)
        cli.wait(30)
        for _ in range(100):
            if not ansible_of(inv):
                break
            time.sleep(0.1)
        assert ansible_of(inv) == [], [Path(f"/proc/{p}/stat").read_text()[:120] for p in ansible_of(inv)]
    finally:
        for pid in ansible_of(inv):
            os.kill(pid, signal.SIGKILL)
        silent.close()
        if "board_side" in locals():
            board_side.close()
