"""The controller refuses to push a board token that is weak, malformed or open to other users.

edge-llm-serve refuses such a token at start (its read_token), so pushing it would make a healthy
service crash-loop on the board and leave launch saying only that /health did not answer. The check
runs on the controller before the first SSH connection, so the boards here are unreachable.
"""

from __future__ import annotations

import os

import pytest

from provisioner import context
from provisioner.fleet.runner import run_playbook
from provisioner.fleet.shared.serve_config import TOKEN_DIR_NAME, token_file_problem
from tests.fleet.test_untrusted_inputs import inventory

GOOD = "Ab3" * 15


def token_file(tmp_path, content: str, mode: int = 0o600, dir_mode: int = 0o700):
    folder = tmp_path / TOKEN_DIR_NAME
    folder.mkdir(exist_ok=True)
    path = folder / "b1"
    path.write_text(content)
    os.chmod(path, mode)
    os.chmod(folder, dir_mode)
    return path


@pytest.mark.parametrize("content,mode,dir_mode,says", [
    ("abc", 0o600, 0o700, "does not hold a token"),
    ("", 0o600, 0o700, "does not hold a token"),
    ("two words " + GOOD, 0o600, 0o700, "does not hold a token"),
    (GOOD, 0o666, 0o700, "open to other users (mode 666)"),
    (GOOD, 0o640, 0o700, "open to other users (mode 640)"),
    (GOOD, 0o600, 0o777, "writable by other users (mode 777)"),
])
def test_a_bad_token_file_is_named_in_one_line(tmp_path, content, mode, dir_mode, says):
    assert says in (token_file_problem(token_file(tmp_path, content, mode, dir_mode)) or "")


def test_a_good_token_file_and_a_missing_one_pass(tmp_path):
    assert token_file_problem(tmp_path / "absent") is None
    assert token_file_problem(token_file(tmp_path, GOOD + "\n")) is None


def test_a_token_that_is_a_folder_or_a_link_is_refused(tmp_path):
    folder = tmp_path / TOKEN_DIR_NAME
    folder.mkdir(mode=0o700)
    (folder / "b1").mkdir()
    assert "not a regular file" in token_file_problem(folder / "b1")
    (folder / "b2").symlink_to("/etc/hostname")
    assert "not a regular file" in token_file_problem(folder / "b2")


def test_launch_refuses_a_weak_token_before_reaching_the_board(tmp_path):
    inv = inventory(tmp_path)
    token_file(tmp_path, "abc")
    run = run_playbook("launch", inv, context.current())
    host = run.hosts["b1"]
    assert host.status == "failed"                    # not "unreachable": refused on the controller
    assert "does not hold a token edge-llm-serve accepts" in host.msg
    token_file(tmp_path, GOOD, mode=0o644)
    run = run_playbook("launch", inv, context.current())
    assert "open to other users (mode 644)" in run.hosts["b1"].msg
