"""The end-to-end rehearsal, and the README's promise that CI runs what it says."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from provisioner.cli import main
from provisioner.errors import UserError
from provisioner.rehearse import RehearsalOptions, split_boards
from tests.sim.realtext import real_completion

ROOT = Path(__file__).resolve().parent.parent


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```bash\n(.*?)```", text, re.S)
    assert block, "README must start with a bash block holding the two commands"
    return [ln.strip() for ln in block.group(1).splitlines() if ln.strip()]


def test_readme_test_command_is_what_ci_runs():
    install_and_run, test_cmd = _readme_commands()[:2]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert test_cmd in [ln.strip() for ln in ci], f"{test_cmd!r} must be a line of .ci/run"
    assert "provisioner rehearse" in install_and_run and "pip install" in install_and_run


def test_readme_first_line_installs_what_the_rehearsal_needs():
    install_and_run = _readme_commands()[0]
    apt = re.search(r"apt-get install -y ([^&]+)&&", install_and_run)
    assert apt and install_and_run.index("apt-get") < install_and_run.index("provisioner rehearse")
    packages = set(apt.group(1).split())
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    from provisioner.rehearse import HOST_TOOLS

    for _prog, pkg in HOST_TOOLS:   # every package the rehearsal's host step asks for, CI installs too
        assert pkg in packages and pkg in ci, pkg


def test_boards_split_over_board_types():
    assert split_boards(4, 2) == [2, 2]
    assert split_boards(5, 2) == [3, 2]
    with pytest.raises(UserError, match="fewer than"):
        split_boards(1, 2)


@pytest.mark.root
@pytest.mark.slow
def test_rehearsal_four_boards_with_one_injected_fault(tmp_path, capsys):
    """4 virtual boards (2 per type), no-burst on one: that board fails verify for burst mode,
    the other three are flashed with the release, verified, launched and answer a completion."""
    work = tmp_path / "rh"
    real = real_completion(RehearsalOptions().prompt, 32)
    rc = main(["rehearse", "--boards", "4", "--fault", "no-burst", "--work-dir", str(work), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 1, "a board failing verification must fail the rehearsal"
    assert all(s["ok"] for s in report["steps"]), [s for s in report["steps"] if not s["ok"]]
    boards = report["boards"]
    assert sorted(b["board"] for b in boards) == ["iq-8275-evk"] * 2 + ["iq-9075-evk"] * 2
    for b in boards:
        lane = next(ln for ln in report["lanes"] if ln["board"] == b["board"])
        assert b["build_id"] == lane["release"], "the board must run what the station flashed"
    faulty = [b for b in boards if b["faults"]]
    assert len(faulty) == 1 and faulty[0]["board"] == "iq-8275-evk"
    bad = faulty[0]
    assert bad["verdict"] == "fail" and "burst" in bad["reason"] and "patch 2" in bad["reason"]
    assert bad["decode_tok_s"] < bad["min_decode_tok_s"]
    for b in boards:
        if b is bad:
            assert "completion" not in b and "eval" not in b
            continue
        assert b["verdict"] == "pass" and b["decode_tok_s"] >= b["min_decode_tok_s"]
        assert b["completion"].strip()
        # the default eval suite ran through each healthy board's own API; the modelled Nemotron answers
        # it, the tiny random-weight model behind the virtual IQ-8275 cannot
        assert b["eval"]["total"] > 0, b
        if b["board"] == "iq-9075-evk":
            assert b["eval"]["score"] >= 0.8, b
        if b["board"] == "iq-8275-evk" and real:
            assert b["completion"] == real[:80]     # Google's runtime wrote it; the NPU only paced it
    # torn down: no sshd or supervisor of this rehearsal left
    leftovers = subprocess.run(["pgrep", "-f", str(work / "sim")], capture_output=True, text=True).stdout.split()
    assert leftovers == []
    # the fleet reached every board pinned to the host keys the station read on its console
    known = (work / "fleet" / "station.known_hosts").read_text().splitlines()
    assert len(known) == 4 and all(line.split()[1] == "ecdsa-sha2-nistp256" for line in known)
    inv = yaml.safe_load((work / "inventory.yml").read_text())
    for group in inv["all"]["children"].values():
        for hv in group["hosts"].values():
            assert f"UserKnownHostsFile={work / 'fleet' / 'station.known_hosts'}" in hv["ansible_ssh_common_args"]
            assert "StrictHostKeyChecking=yes" in hv["ansible_ssh_common_args"]
    # the station recorded every attempt
    hist = subprocess.run(["sqlite3", str(work / "station.db"), "select count(*) from attempts"],
                          capture_output=True, text=True)
    if hist.returncode == 0:
        assert int(hist.stdout.strip()) == 4


@pytest.mark.parametrize("args,needle", [
    (["--fault", "bogus"], "unknown fault 'bogus'"),
    (["--boards", "1"], "fewer than the 2 board types"),
    (["nope.yaml"], "no such manifest"),
])
def test_bad_options_fail_before_any_board_starts(tmp_path, capsys, args, needle):
    assert main(["rehearse", "--work-dir", str(tmp_path / "w"), *args]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "w").exists()


def test_a_second_rehearsal_in_the_same_work_dir_is_refused(tmp_path, capsys):
    """Two rehearsals sharing a work dir would share boards and inventory (a 4-board run reported 12)."""
    import fcntl

    work = tmp_path / "w"
    work.mkdir()
    with (work / ".rehearsal.lock").open("a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("4242\n")
        held.flush()
        assert main(["rehearse", "--work-dir", str(work)]) == 2
    err = capsys.readouterr().err
    assert "is in use by another rehearsal (pid 4242)" in err and "--work-dir" in err
    assert len(err.strip().splitlines()) == 1
    assert not (work / "sim").exists()
