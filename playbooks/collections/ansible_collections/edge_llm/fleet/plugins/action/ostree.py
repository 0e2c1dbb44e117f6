"""Controller side of edge_llm.fleet.ostree: the task's arguments, completed from the update-os variables.

The board module of the same name does all the work. This action only reads the inputs the task does not
pass from the ``edge_llm_update_os_*`` variables by name (plugin_utils/board_action.py says why), so the
role's stage task is one board call with no templated argument. A rollback reads why from the failed
task's result by name, and fails the task itself once the board is back on the previous deployment.
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible_collections.edge_llm.fleet.plugins.plugin_utils.board_action import BoardAction, update_os


class ActionModule(BoardAction):
    _VALID_ARGS = frozenset(("mode", "commit", "branch", "repo_url", "remote", "osname", "kargs", "state_file",
                             "why", "pull_retries", "pull_delay"))
    VARIABLES = {"commit": "edge_llm_update_os_commit", "kargs": "edge_llm_update_os_kargs",
                 "state_file": "edge_llm_update_os_state_file", "branch": "edge_llm_update_os_branch",
                 "repo_url": "edge_llm_update_os_repo_url", "remote": "edge_llm_update_os_remote",
                 "osname": "edge_llm_update_os_osname", "pull_retries": "edge_llm_update_os_pull_retries"}

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = self._inputs(task_vars)
        if args.get("mode") == "stage":
            # the release must be this board type's before the board pulls a byte (provisioner.fleet.update_os)
            why = update_os.release_mismatch(str(self._var(task_vars, "edge_llm_board") or ""),
                                             str(self._var(task_vars, "edge_llm_update_os_board") or ""),
                                             str(args.get("branch") or ""))
            if why:
                result.update(failed=True, changed=False, msg=why,
                              edge_llm={"kind": "update-os", "outcome": "refused", "reason": why})
                return result
        if args.get("mode") == "rollback" and not args.get("why"):
            # why the gate failed: the failed task's own result, read by name and never templated (it carries
            # the board's data, e.g. its os-release BUILD_ID)
            failed = task_vars.get("ansible_failed_result")
            if isinstance(failed, Mapping) and failed.get("msg"):
                args["why"] = str(failed["msg"])
        done = self._module("edge_llm.fleet.ostree", args, task_vars)
        ota = done.get("edge_llm") or {}
        if args.get("mode") == "rollback" and not done.get("failed") and ota.get("outcome") == "rolled back":
            # the rollback is done: the task fails with why, so the role needs no fail task templating it
            done.update(failed=True, msg=f"update to {str(args.get('commit') or '')[:12]} rolled back: "
                                         f"{ota.get('why') or 'unknown'}")
        return done
