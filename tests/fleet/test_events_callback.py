"""The events stdout callback under a real ansible-playbook run (local connection, no boards needed).

A failing ``ansible.builtin.uri`` (the launch role's GET /health wait) returns its own ``status``
(the HTTP status, -1 when nothing answers). The callback must still emit the host event with the
task status and the failure detail, or `fleet launch` shows a failed board without saying why.
"""

from __future__ import annotations

import sys
from pathlib import Path

from provisioner import context
from provisioner.fleet.runner import EventCollector, ansible_env
from provisioner.process import run_streaming
from tests.fleet.simfleet import free_port

PLAY = """\
- hosts: all
  gather_facts: false
  tasks:
    - name: Wait until GET /health answers 200
      ansible.builtin.uri:
        url: "http://127.0.0.1:{port}/health"
        timeout: 2
        status_code: 200
"""


def test_failed_uri_result_keeps_status_and_detail(tmp_path: Path) -> None:
    play = tmp_path / "health.yml"
    play.write_text(PLAY.format(port=free_port()), encoding="utf-8")
    inv = tmp_path / "inventory.ini"
    inv.write_text(f"board-1 ansible_connection=local ansible_python_interpreter={sys.executable}\n", encoding="utf-8")
    events: list[dict] = []
    collector = EventCollector(events.append)
    res = run_streaming(["ansible-playbook", "-i", str(inv), str(play)],
                        on_line=collector.line, env=ansible_env(base=context.current().env), timeout_s=120)
    assert res.returncode != 0
    noise = [ln for ln in collector.other if "callback" in ln.lower() or "multiple values" in ln]
    assert noise == [], noise                                       # the callback itself did not fail
    board = collector.hosts["board-1"]
    assert board.status == "failed"
    assert board.failed_task == "Wait until GET /health answers 200"
    host_events = [e for e in events if e.get("event") == "host"]
    assert [(e["status"], e.get("http_status")) for e in host_events] == [("failed", -1)]   # both kept, apart
    assert "Status code was -1" in board.msg or "Connection refused" in board.msg, board.msg
