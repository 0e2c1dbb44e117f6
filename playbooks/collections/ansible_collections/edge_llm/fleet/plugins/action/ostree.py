"""Controller side of edge_llm.fleet.ostree: the task's arguments, completed from the update-os variables.

The board module of the same name does all the work. This action only reads the inputs the task does not
pass from the ``edge_llm_update_os_*`` variables by name (plugin_utils/board_action.py says why), so the
role's stage task is one board call with no templated argument.
"""

from __future__ import annotations

from ansible_collections.edge_llm.fleet.plugins.plugin_utils.board_action import BoardAction


class ActionModule(BoardAction):
    _VALID_ARGS = frozenset(("mode", "commit", "sysroot", "trial_file", "branch", "repo_url", "remote", "osname",
                             "pull_retries", "pull_delay"))
    VARIABLES = {"commit": "edge_llm_update_os_commit", "sysroot": "edge_llm_update_os_sysroot",
                 "trial_file": "edge_llm_update_os_trial_file", "branch": "edge_llm_update_os_branch",
                 "repo_url": "edge_llm_update_os_repo_url", "remote": "edge_llm_update_os_remote",
                 "osname": "edge_llm_update_os_osname", "pull_retries": "edge_llm_update_os_pull_retries"}

    def run(self, tmp=None, task_vars=None):
        super().run(tmp, task_vars)
        task_vars = task_vars or {}
        return self._module("edge_llm.fleet.ostree", self._inputs(task_vars), task_vars)
