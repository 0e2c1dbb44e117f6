"""The board's edge_llm.fleet.ostree module on states a virtual board does not reach by itself.

The ostree CLI is a stand-in here that records each call and answers ``admin status`` with the lines the
test names (the real format, ot-admin-builtin-status.c:98-99 @ ostreedev/ostree v2026.1): what is checked
is what the module decides from a board's deployments and record, and which ostree commands it runs.
Real ostree sysroots are exercised end to end in test_sota_boot.py and test_update_os.py.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

MODULE = (Path(__file__).resolve().parents[2]
          / "playbooks/collections/ansible_collections/edge_llm/fleet/plugins/modules/ostree.py")
C1, C2, C3 = ("1" * 64, "2" * 64, "3" * 64)


class Failed(Exception):
    """fail_json: the task failed with this message."""


class _Module:
    check_mode = False

    def fail_json(self, msg, **_more):
        raise Failed(msg)


@pytest.fixture
def board(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("edge_llm_fleet_ostree", MODULE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    calls: list[list[str]] = []
    answer = {"status": (0, "", "")}

    def run(argv):
        calls.append(argv[1:])
        if argv[1:3] == ["admin", "status"]:
            return answer["status"]
        return 0, "", ""

    monkeypatch.setattr(mod, "run", run)
    monkeypatch.setattr(mod, "BOOTED_FLAG", str(tmp_path / "ostree-booted"))
    monkeypatch.setattr(mod, "BOOT_ID", str(tmp_path / "boot_id"))
    (tmp_path / "ostree-booted").write_text("")
    (tmp_path / "boot_id").write_text("boot-1\n")
    p = {"commit": C2, "branch": "qcom/iq-8275-evk", "repo_url": "http://repo", "remote": "edge-llm",
         "osname": "nodistro", "kargs": [], "state_file": str(tmp_path / "update-os.json"), "why": "",
         "pull_retries": 0, "pull_delay": 0}

    class Board:
        def __init__(self):
            self.mod, self.calls, self.p, self.answer, self.dir = mod, calls, p, answer, tmp_path

        def status(self, *lines, rc=0, err=""):
            self.answer["status"] = (rc, "".join(f"{ln}\n" for ln in lines), err)

        def record(self, data=None):
            path = Path(p["state_file"])
            if data is not None:
                path.write_text(json.dumps(data))
            return json.loads(path.read_text()) if path.is_file() else {}

        def boot(self, boot_id):
            (tmp_path / "boot_id").write_text(boot_id)

        def call(self, mode, **more):
            state = mod.read_state(_Module(), {**p, **more})
            handler = {"stage": mod.stage, "commit": mod.commit_mode, "rollback": mod.rollback}[mode]
            return handler(_Module(), {**p, **more}, state)

        def admin_calls(self):
            return [c[1:] for c in self.calls if c[:1] == ["admin"] and c[1:2] != ["status"]]

    return Board()


def test_a_failed_status_fails_the_task_with_ostrees_message(board):
    # Before: rc was ignored, the board read as "no deployments", and a rollback recorded one it never did.
    board.status(rc=1, err="error: opening /boot: No such file or directory")
    with pytest.raises(Failed, match="ostree admin status failed.*opening /boot"):
        board.call("rollback")
    assert board.record() == {}


def test_rollback_refuses_when_no_deployment_is_booted(board):
    board.status(f"  nodistro {C2}.0", f"  nodistro {C1}.0")
    board.record({"pending": {"commit": C2, "from": C1, "boot_id": "boot-0", "phase": "staged"}})
    with pytest.raises(Failed, match="no booted deployment: nothing rolled back"):
        board.call("rollback")
    assert "rolled_back" not in board.record() and board.admin_calls() == []


def test_the_booted_commit_is_up_to_date_only_as_the_default(board):
    # Before: a board running the commit with another deployment as the default was "up-to-date", and its
    # next reboot left the release.
    board.status(f"  nodistro {C1}.0", f"* nodistro {C2}.0")
    result = board.call("stage")
    assert result["up_to_date"] is False and result["reboot"] is False
    assert board.admin_calls() == [["set-default", "1"]]
    assert board.record()["pending"]["commit"] == C2


def test_up_to_date_board_is_left_alone(board):
    board.status(f"* nodistro {C2}.0", f"  nodistro {C1}.0")
    assert board.call("stage")["up_to_date"] is True and board.admin_calls() == []


@pytest.mark.parametrize(("lines", "phase"), [
    ((f"* nodistro {C2}.0", f"  nodistro {C1}.0"), "staged"),            # runs the unvetted commit
    ((f"  nodistro {C1}.0", f"* nodistro {C2}.0"), "rolling back"),      # half rolled back
])
def test_stage_refuses_while_another_commits_update_is_unfinished(board, lines, phase):
    # Before: the deploy of C3 kept only the booted and merge deployments, dropping C1, the last good one.
    board.status(*lines)
    board.record({"pending": {"commit": C2, "from": C1, "boot_id": "boot-0", "phase": phase}})
    with pytest.raises(Failed, match=f"unfinished update to {C2[:12]} \\({phase}\\): rerun update-os with that"):
        board.call("stage", commit=C3)
    assert board.admin_calls() == [] and not any("pull" in c for c in board.calls)
    assert board.record()["pending"]["commit"] == C2


def test_stage_goes_on_when_the_other_update_already_fell_back(board):
    """Boot counting took the board back to C1 and the controller never ran the gate: C2 is not booted, so
    deploying C3 keeps C1 (booted) and only C2 goes."""
    board.status(f"  nodistro {C2}.0", f"* nodistro {C1}.0")
    board.record({"pending": {"commit": C2, "from": C1, "boot_id": "boot-0", "phase": "staged"}})
    board.call("stage", commit=C3)
    assert board.admin_calls()[0][0] == "deploy"


def test_second_rollback_call_fails_when_the_reboot_came_back_into_the_failed_deployment(board):
    board.status(f"* nodistro {C2}.0", f"  nodistro {C1}.0")
    board.record({"pending": {"commit": C2, "from": C1, "boot_id": "boot-0", "phase": "staged"}})
    first = board.call("rollback", why="decode 3 tok/s < 10")
    assert first["reboot"] is True and board.admin_calls() == [["set-default", "1"]]
    board.boot("boot-2")                  # rebooted, but the firmware chose the failed entry again
    with pytest.raises(Failed, match=f"still on the failed deployment {C2[:12]} after the reboot"):
        board.call("rollback")
    assert "rolled_back" not in board.record()


def test_rollback_call_on_the_same_boot_still_asks_for_the_reboot(board):
    """A controller killed before the reboot: the rerun's rollback call is in the same boot, and reboots."""
    board.status(f"* nodistro {C2}.0", f"  nodistro {C1}.0")
    board.record({"pending": {"commit": C2, "from": C1, "boot_id": "boot-0", "phase": "staged"}})
    board.call("rollback", why="gate failed")
    assert board.call("rollback")["reboot"] is True


def test_rollback_once_back_on_the_previous_deployment_removes_the_failed_one(board):
    board.status(f"* nodistro {C1}.0", f"  nodistro {C2}.0")
    board.record({"pending": {"commit": C2, "from": C1, "boot_id": "boot-0", "phase": "rolling back",
                              "why": "gate failed", "rollback_boot_id": "boot-0"}})
    result = board.call("rollback")
    assert result["edge_llm"]["outcome"] == "rolled back" and board.admin_calls() == [["undeploy", "1"]]
    assert board.record() == {"rolled_back": {C2: "gate failed"}}


#: kernel arguments: (argument, whether the controller's release check and the board module both take it)
KARGS = [("qcom_scm.download_mode=0", True), ("qcom_scm.download_mode=1", True), ("console=ttyMSM0,115200", True),
         ("root=LABEL=otaroot", True), ("quiet=", True), ("a b=1", False), ("x=1 y=2", False), ("x='1'", False),
         ('x="1"', False), ("novalue", False), ("=1", False), ("x=\t1", False)]


@pytest.mark.parametrize(("karg", "ok"), KARGS)
def test_the_board_takes_every_kernel_argument_the_release_check_takes(board, karg, ok):
    """Two copies of the grammar (the board module is stdlib only): the board must never refuse what the
    controller let into a release, and both refuse what a shell or the BLS options line would split."""
    from provisioner.ota.commit import KARG_RE

    assert bool(KARG_RE.match(karg)) is ok
    assert bool(board.mod.KARG_RE.match(karg)) is ok


@pytest.mark.parametrize("mode", [False, True])
def test_the_release_kernel_argument_passes_both_checks(board, mode):
    from types import SimpleNamespace

    from provisioner.image.release import ota_kargs
    from provisioner.ota.commit import KARG_RE

    (karg,) = ota_kargs(SimpleNamespace(image=SimpleNamespace(download_mode=mode)))
    assert karg == f"qcom_scm.download_mode={int(mode)}"
    assert KARG_RE.match(karg) and board.mod.KARG_RE.match(karg)
