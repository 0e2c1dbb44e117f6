"""Nothing the tool reads from a release, an artifact or a board is ever templated by Ansible.

A Jinja template planted in a field of release.json, of a model.json in the artifact tree, or of an
artifact index must never run on the controller: each field is validated by type before it is used,
and what reaches Ansible is marked ``!unsafe``. The template used here would create a marker file on
the controller, so "nothing ran" is a file that does not exist. The boards are unreachable (a closed
loopback port): everything under test happens on the controller, before the first SSH connection.
"""

from __future__ import annotations

import copy
import json
import socket
from pathlib import Path

import pytest

from provisioner import context
from provisioner.cli import main
from provisioner.fleet import runner
from provisioner.fleet.runner import FleetOptions

COMMIT = "c0ffee" + "0" * 58
SHA = "5" * 64


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def template(marker: Path) -> str:
    """A value that, if Ansible ever templated it, creates ``marker`` and still looks like a commit id."""
    return "{{ lookup('pipe', 'touch " + str(marker) + "; echo " + COMMIT + "') }}"


def inventory(tmp: Path, group: str = "iq_8275_evk") -> Path:
    inv = tmp / "inventory.yml"
    inv.write_text(json.dumps({"all": {"children": {group: {"hosts": {"b1": {
        "ansible_host": "127.0.0.1", "ansible_port": closed_port(), "ansible_user": "root",
        "ansible_ssh_common_args": "-o ConnectTimeout=2 -o StrictHostKeyChecking=no"}}}}}}))
    return inv


def release_json(board: str = "iq-8275-evk", branch: str = "iq-8275-evk") -> dict:
    return {"format": 1, "release": "gemma4-e2b-iq8275-2026.11", "board": board, "machine": branch,
            "ota": {"kind": "ostree", "tarball": "ostree/ostreecommit.tar.xz", "sha256": SHA, "size": 10,
                    "branch": branch, "commit": COMMIT, "version": "1.0", "subject": "Commit-id: x",
                    "content_size": 20}}


def string_paths(data: object, prefix: tuple = ()) -> list[tuple]:
    """Every path to a string value in a JSON-like document."""
    if isinstance(data, dict):
        return [p for k, v in data.items() for p in string_paths(v, (*prefix, k))]
    if isinstance(data, list):
        return [p for i, v in enumerate(data) for p in string_paths(v, (*prefix, i))]
    return [prefix] if isinstance(data, str) else []


def planted(data: dict, path: tuple, value: str) -> dict:
    out = copy.deepcopy(data)
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


def run_cli(capsys, *args: object) -> tuple[int, str]:
    capsys.readouterr()
    code = main([str(a) for a in args])
    cap = capsys.readouterr()
    assert "Traceback" not in cap.err + cap.out
    return code, cap.err + cap.out


def test_extra_vars_are_never_templated_by_ansible(tmp_path):
    """The second wall: whatever a validator lets through reaches Ansible marked unsafe, in every variable."""
    marker = tmp_path / "pwned"
    evil = template(marker)
    extra = {"edge_llm_update_os_commit": evil, "edge_llm_update_os_branch": evil, "edge_llm_update_os_board": evil,
             "edge_llm_update_os_repo_url": evil, "edge_llm_expected_build_id": evil,
             "edge_llm_deploy_index": {"base_url": evil, "models": [{"name": evil, "files": [{"url": evil}]}]}}
    for action in ("update-os", "deploy", "verify"):
        run = runner.run_playbook(action, inventory(tmp_path), context.current(), FleetOptions(extra_vars=extra))
        assert set(run.hosts) == {"b1"}
        assert not marker.exists(), f"fleet {action} templated a value it was given"


def test_extra_vars_come_back_from_ansibles_loader_as_the_same_untrusted_values(tmp_path):
    """Read back by ansible-core's own loader as it reads ``-e @file``: every value is what the tool wrote (a
    checksum of zeros stays a string, "null" and "yes" stay text, 1.10 is not a float) and no string is
    trusted as a template."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import is_trusted_as_template

    values = {"sha256": "0" * 64, "version": "1.10", "none": "null", "yes": "yes", "size": 1 << 50, "ok": True,
              "evil": "{{ lookup('pipe', 'id') }}", "nested": {"files": [{"name": "a b", "url": "http://x/{{y}}"}]}}
    path = tmp_path / "extra_vars.json"
    runner.write_extra_vars(path, values)
    back = DataLoader().load_from_file(str(path), trusted_as_template=True)
    assert back == values
    strings = [back["sha256"], back["version"], back["none"], back["yes"], back["evil"],
               back["nested"]["files"][0]["name"], back["nested"]["files"][0]["url"]]
    assert not any(is_trusted_as_template(v) for v in strings)


def test_release_json_with_a_template_in_any_field_runs_nothing(tmp_path, capsys):
    marker = tmp_path / "pwned"
    inv = inventory(tmp_path)
    base = release_json()
    paths = string_paths(base)
    assert len(paths) >= 9
    refused = 0
    for path in paths:
        rel = tmp_path / ("rel-" + "-".join(map(str, path)))
        rel.mkdir()
        (rel / "release.json").write_text(json.dumps(planted(base, path, template(marker))))
        code, out = run_cli(capsys, "fleet", "update-os", "--check", "-i", inv, "--release", rel,
                            "--repo", "http://127.0.0.1:1/repo")
        assert code != 0
        assert not marker.exists(), f"a template in release.json {'.'.join(map(str, path))} ran"
        if "release.json" in out:
            refused += 1
    # the fields that reach the boards (commit, branch, board, release id) are refused by type
    assert refused >= 4


@pytest.mark.parametrize("field,value", [
    (("ota", "commit"), "C0FFEE"), (("ota", "branch"), "../x"), (("ota", "branch"), "a b"),
    (("board",), "iq-1234"), (("release",), "Release 1"), (("ota", "sha256"), "xyz"),
    (("ota", "tarball"), "../../etc/shadow"), (("ota", "size"), "10"),
])
def test_release_json_fields_are_checked_by_type(tmp_path, capsys, field, value):
    rel = tmp_path / "rel"
    rel.mkdir()
    (rel / "release.json").write_text(json.dumps(planted(release_json(), field, value)))
    code, out = run_cli(capsys, "fleet", "update-os", "-i", inventory(tmp_path), "--release", rel,
                        "--repo", "http://127.0.0.1:1/repo")
    assert code != 0
    assert f"'{field[-1]}'" in out or f"'ota.{field[-1]}'" in out
    assert "rebuild the release" in out


def test_a_release_that_is_a_json_array_is_one_line(tmp_path, capsys):
    rel = tmp_path / "rel"
    rel.mkdir()
    (rel / "release.json").write_text("[1, 2]")
    code, out = run_cli(capsys, "fleet", "update-os", "-i", inventory(tmp_path), "--release", rel,
                        "--repo", "http://127.0.0.1:1/repo")
    assert code not in (0, 70)
    assert "not a JSON object" in out


@pytest.mark.parametrize("serial", ["abc", "0", "0%", "101%", "-1"])
def test_a_bad_serial_is_one_line_before_ansible(tmp_path, capsys, serial):
    rel = tmp_path / "rel"
    rel.mkdir()
    (rel / "release.json").write_text(json.dumps(release_json()))
    code, out = run_cli(capsys, "fleet", "update-os", "-i", inventory(tmp_path), "--release", rel,
                        "--repo", "http://127.0.0.1:1/repo", "--serial", serial)
    assert code not in (0, 70)
    assert "--serial" in out and "not a batch size" in out


def test_a_release_for_another_board_type_is_refused_before_the_board_pulls(tmp_path, capsys):
    """An IQ-9075 release on an IQ-8275 board: the board fails with the reason, it is never reached."""
    rel = tmp_path / "rel"
    rel.mkdir()
    (rel / "release.json").write_text(json.dumps(release_json("iq-9075-evk", "iq-9075-evk")))
    report = tmp_path / "report.json"
    code, out = run_cli(capsys, "fleet", "update-os", "-i", inventory(tmp_path, "iq_8275_evk"), "--release", rel,
                        "--repo", "http://127.0.0.1:1/repo", "--report", report)
    assert code == 1
    row = json.loads(report.read_text())["boards"][0]
    assert row["verdict"] == "fail"                   # refused, not "unreachable": the board was never contacted
    assert "built for iq-9075-evk" in row["reason"]


def test_a_branch_of_another_board_type_is_refused(tmp_path, capsys):
    rel = tmp_path / "rel"
    rel.mkdir()
    (rel / "release.json").write_text(json.dumps(release_json("iq-8275-evk", "iq-9075-evk")))
    report = tmp_path / "report.json"
    code, _ = run_cli(capsys, "fleet", "update-os", "--check", "-i", inventory(tmp_path), "--release", rel,
                      "--repo", "http://127.0.0.1:1/repo", "--report", report)
    assert code == 1
    row = json.loads(report.read_text())["boards"][0]
    assert "OSTree branch 'iq-9075-evk'" in row["reason"]


def artifact_tree(root: Path, meta: dict) -> Path:
    mdir = root / "models" / "gemma-4-e2b" / "v1"
    mdir.mkdir(parents=True)
    (mdir / "model.litertlm").write_bytes(b"LITERTLM" + bytes(64))
    (mdir / "model.json").write_text(json.dumps(meta))
    return root


def test_model_json_with_a_template_in_any_field_runs_nothing(tmp_path, capsys):
    marker = tmp_path / "pwned"
    inv = inventory(tmp_path)
    meta = {"reference": "gemma-4-e2b", "kind": "litertlm", "runtime": "litert_lm", "qairt": "2.44.0.260225"}
    for key in meta:
        root = artifact_tree(tmp_path / f"art-{key}", {**meta, key: template(marker)})
        code, out = run_cli(capsys, "fleet", "deploy", "--check", "-i", inv, "--artifacts", root,
                            "--artifact-url", "http://127.0.0.1:1")
        assert code != 0
        assert not marker.exists(), f"a template in model.json {key} ran"
        assert f"'{key}' is not a valid value" in out


def test_an_artifact_index_is_checked_field_by_field(tmp_path, capsys):
    """An index .json handed to `fleet deploy`: every field is of its type, or nothing runs."""
    marker = tmp_path / "pwned"
    good = {"base_url": "http://10.0.0.2:8000", "qairt": [], "runtimes": [], "models": [
        {"name": "gemma-4-e2b", "version": "v1", "kind": "litertlm", "runtime": "litert_lm",
         "qairt": "2.44.0.260225", "size": 72, "file": "model.litertlm", "sha256": SHA,
         "files": [{"name": "model.litertlm", "url": "http://10.0.0.2:8000/models/gemma-4-e2b/v1/model.litertlm",
                    "sha256": SHA, "size": 72}]}]}
    inv = inventory(tmp_path)
    for path in string_paths(good):
        index = tmp_path / ("index-" + "-".join(map(str, path)) + ".json")
        index.write_text(json.dumps(planted(good, path, template(marker))))
        code, out = run_cli(capsys, "fleet", "deploy", "--check", "-i", inv, "--artifacts", index)
        assert code not in (0, 70)
        assert "artifact index" in out, f"a template in the index at {path} was not refused: {out[-300:]}"
        assert not marker.exists()
    for bad in ({"files": [{"name": "../../etc/passwd", "url": "http://x/y", "sha256": SHA, "size": 1}]},
                {"size": True}, {"kind": "exe"}):
        index = tmp_path / "index-bad.json"
        index.write_text(json.dumps({**good, "models": [{**good["models"][0], **bad}]}))
        code, out = run_cli(capsys, "fleet", "deploy", "--check", "-i", inv, "--artifacts", index)
        assert code not in (0, 70) and "artifact index" in out
