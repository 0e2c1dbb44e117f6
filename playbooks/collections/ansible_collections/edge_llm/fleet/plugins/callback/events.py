"""JSON-lines stdout callback: one event per line, for `provisioner fleet` to show live progress and build reports.

Each line is a JSON object with "event" in play | task | host | stats. Host events carry the status
(ok, changed, failed, unreachable, skipped), the message and, for edge_llm tasks, the structured
``edge_llm`` payload (verify verdicts, deploy transfers, benchmark figures). No secrets: results of
no_log tasks are replaced by Ansible before they reach a callback.
"""

from __future__ import annotations

import json
import sys
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
---
name: events
type: stdout
short_description: one JSON object per line (play, task, host result, stats)
description:
  - Machine-readable progress for the edge-llm provisioner CLI.
author: edge-llm provisioner
"""

KEEP = ("msg", "rc", "stderr", "bytes_downloaded", "resumed_from", "dest", "status", "elapsed",
        "attempts", "skip_reason", "edge_llm")
# Result keys that would clash with the event's own fields. ansible.builtin.uri returns the HTTP
# status as "status" (-1 when nothing answered); the event's "status" is the task outcome.
RENAMED = {"status": "http_status"}


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "edge_llm.fleet.events"

    def __init__(self):
        super().__init__()
        self._task = None
        self._play = None

    def _emit(self, **data):
        data["t"] = round(time.time(), 3)
        sys.stdout.write(json.dumps(data, default=str, sort_keys=True) + "\n")
        sys.stdout.flush()

    def v2_playbook_on_start(self, playbook):
        self._emit(event="playbook", file=getattr(playbook, "_file_name", None))

    def v2_playbook_on_play_start(self, play):
        self._play = play.get_name()
        self._emit(event="play", name=self._play)

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._task = task
        self._emit(event="task", name=task.get_name(), action=task.action, role=getattr(task._role, "_role_name", None))

    def v2_playbook_on_handler_task_start(self, task):
        self.v2_playbook_on_task_start(task, False)

    def _result(self, result, status, **extra):
        res = result._result or {}
        data = {RENAMED.get(k, k): res[k] for k in KEEP if k in res}
        if isinstance(data.get("msg"), str) and len(data["msg"]) > 4000:
            data["msg"] = data["msg"][:4000]
        if isinstance(data.get("stderr"), str):
            data["stderr"] = data["stderr"][-2000:]
        if res.get("_ansible_no_log"):
            data = {"msg": "(output hidden: no_log)"}
        task = result._task
        event = {**data, **extra}       # the event's own fields last: they always win
        event.update(event="host", host=result._host.get_name(), task=task.get_name(), action=task.action,
                     status=status, changed=bool(res.get("changed")))
        self._emit(**event)

    def v2_runner_on_ok(self, result):
        self._result(result, "changed" if result._result.get("changed") else "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._result(result, "failed", ignored=bool(ignore_errors))

    def v2_runner_on_unreachable(self, result):
        # a task with ignore_unreachable (update-os's gate, which waits for a board that rebooted under it)
        # does not make the board unreachable for the report
        self._result(result, "unreachable", ignored=bool(getattr(result._task, "ignore_unreachable", False)))

    def v2_runner_on_skipped(self, result):
        self._result(result, "skipped")

    def v2_runner_item_on_ok(self, result):
        self._result(result, "changed" if result._result.get("changed") else "ok", item=True)

    def v2_runner_item_on_failed(self, result):
        self._result(result, "failed", item=True)

    def v2_runner_on_async_failed(self, result):
        self._result(result, "failed")

    def v2_playbook_on_no_hosts_matched(self):
        self._emit(event="no_hosts")

    def v2_playbook_on_stats(self, stats):
        hosts = {}
        for h in sorted(stats.processed.keys()):
            hosts[h] = stats.summarize(h)
        self._emit(event="stats", hosts=hosts)
