"""qcom_scm download_mode read back in both kernel spellings: the same mode passes or fails the same way.

Older (downstream) kernels print the mode as a number, newer mainline ones by name (Linux
drivers/firmware/qcom/qcom_scm.c, download_mode_name[] and get_download_mode(), read at
torvalds/linux 14062c267f09, v6.12-rc7): off = 0, full = 1, mini = 2, "full,mini" = 3.
"""

from __future__ import annotations

import pytest

from provisioner import catalog
from provisioner.contracts.inventory import HostVars
from provisioner.fleet import verify


def _check(read_back: str | None, policy: int | None) -> verify.Check:
    expect = HostVars(board=catalog.board("iq-8275-evk"), download_mode=policy)
    probe = {"read": {"download_mode": {"content": read_back}}}
    (check,) = verify._download_mode_check(expect, probe)
    return check


@pytest.mark.parametrize(("number", "name"), [("0", "off"), ("1", "full")])
@pytest.mark.parametrize("policy", [0, 1])
def test_both_spellings_of_one_mode_get_the_same_verdict(number, name, policy):
    by_number, by_name = _check(f"{number}\n", policy), _check(f"{name}\n", policy)
    assert by_number.ok == by_name.ok == (int(number) == policy)
    if not by_name.ok:
        assert by_name.diagnosis == "download-mode" and f"policy {policy}" in by_name.detail


def test_a_production_board_in_minidump_mode_fails_and_says_which_mode():
    """mini still parks a crashed board in download mode: not the production policy 0, nor full (1)."""
    for policy in (0, 1):
        check = _check("mini\n", policy)
        assert not check.ok and check.diagnosis == "download-mode" and "mini" in check.detail


def test_full_and_mini_together_is_not_full_alone():
    assert not _check("full,mini\n", 1).ok and not _check("full,mini\n", 0).ok


def test_a_spelling_no_kernel_prints_fails_instead_of_passing_or_crashing():
    check = _check("unknown mode\n", 0)        # what get_download_mode() prints for a mode it has no name for
    assert not check.ok and "unknown mode" in check.detail
    assert _check("full\n", None).ok           # no policy: any mode passes, and is shown


@pytest.mark.parametrize(("policy", "mode"), [(0, 0), ("1", 1), ("full", 1), ("off", 0), (False, 0), (True, 1),
                                              ("mini", 2), ("any", None)])
def test_the_policy_may_be_written_in_either_spelling(policy, mode):
    """An inventory may name the mode the way the board prints it; YAML 1.1 reads a bare off/on as a bool."""
    hv = HostVars.from_vars({"edge_llm_board": "iq-8275-evk", "edge_llm_download_mode": policy})
    assert hv.download_mode == mode


def test_a_policy_no_kernel_knows_is_refused_by_name():
    with pytest.raises(ValueError, match="edge_llm_download_mode"):
        HostVars.from_vars({"edge_llm_board": "iq-8275-evk", "edge_llm_download_mode": "ramdump"})
