"""`fleet report --from-pull` against hostile or broken uploads (issue 21, item 8 and the pull-directory lows).

A board in ansible-pull mode uploads ``<board>.jsonl`` to a collector; anything that can PUT there can
write any content. The report takes a board's identity from the file's name, reads only regular files
of bounded size, skips (and counts) lines it cannot use, and escapes board text on the terminal and in
CSV. Every test runs the CLI as an operator would and checks what the operator sees.
"""

from __future__ import annotations

import csv
import io
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest


def _verify(host: str, ok: bool = True, reason: str = "", release: str = "r1") -> dict:
    payload = {"kind": "verify", "ok": ok, "reason": reason, "release": release, "qairt": ["2.44.0"],
               "checks": [], "board": "iq-8275-evk",
               "models": {"m": {"decode_tok_s": 12.0 if ok else 2.0, "min_decode_tok_s": 5.0, "ttft_s": 0.2}}}
    return {"event": "host", "host": host, "task": "Verify this board", "action": "edge_llm.fleet.verify",
            "status": "ok" if ok else "failed", "changed": False, "msg": reason, "edge_llm": payload}


def _report(host: str, ok: bool = True, reason: str = "", release: str = "r1") -> list[dict]:
    """What edge-llm-pull.py uploads for one board: a pull head, the playbook's events, the stats."""
    return [{"event": "pull", "host": host, "url": "https://git.lan/fleet.git", "branch": "main",
             "commit": "a" * 40, "rc": 0 if ok else 2, "t": 1.0},
            _verify(host, ok, reason, release),
            {"event": "stats", "hosts": {host: {"ok": 1, "failures": 0 if ok else 1}}}]


def _write(path: Path, events: list, extra: str = "") -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in events) + extra, encoding="utf-8")
    return path


def _limit_memory() -> None:
    """A 2 GiB address-space cap: a report that reads without bound fails instead of taking the machine."""
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "provisioner", "fleet", "report", *args], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "COLUMNS": "250"}, preexec_fn=_limit_memory)


def _rows(report: Path) -> dict[str, dict]:
    return {b["board"]: b for b in json.loads(report.read_text())["boards"]}


def test_another_boards_upload_cannot_turn_a_failure_into_pass(tmp_path):
    pulls = tmp_path / "pulls"
    pulls.mkdir()
    _write(pulls / "b1.jsonl", _report("b1", ok=False, reason="decode 2.0 tok/s < 5"))
    # b2 reports itself, then claims b1 passed; b3 only ever talks about b1
    _write(pulls / "b2.jsonl", _report("b2") + _report("b1"))
    _write(pulls / "b3.jsonl", _report("b1"))
    out = tmp_path / "r.json"
    proc = _cli("--from-pull", str(pulls), "--report", str(out))
    assert proc.returncode == 1, proc.stderr
    rows = _rows(out)
    assert rows["b1"]["verdict"] == "fail" and "decode 2.0" in rows["b1"]["reason"]
    assert rows["b1"]["details"]["pull"]["rc"] == 2                   # b1's own head, not b2's
    # the boards that spoke for b1 do not pass, and the operator is told why
    assert rows["b2"]["verdict"] != "pass" and "other board" in rows["b2"]["reason"]
    assert rows["b3"]["verdict"] != "pass"
    assert "b2.jsonl" in proc.stderr and "b3.jsonl" in proc.stderr


def test_a_board_in_no_inventory_is_not_counted_as_passing(tmp_path):
    pulls = tmp_path / "pulls"
    pulls.mkdir()
    _write(pulls / "b1.jsonl", _report("b1"))
    _write(pulls / "stranger.jsonl", _report("stranger"))
    inv = tmp_path / "inv.yml"
    inv.write_text("all:\n  hosts:\n    b1:\n      ansible_host: 192.0.2.1\n    b2:\n      ansible_host: 192.0.2.2\n")
    out = tmp_path / "r.json"
    proc = _cli("--from-pull", str(pulls), "-i", str(inv), "--report", str(out))
    rows = _rows(out)
    assert list(rows) == ["b1", "b2"]                                   # the inventory's boards, in its order
    assert rows["b1"]["verdict"] == "pass" and rows["b2"]["verdict"] == "not-run"
    assert proc.returncode == 1                                         # b2 has not reported
    assert "stranger" in proc.stderr and "not in the inventory" in proc.stderr
    assert any("stranger" in n for n in json.loads(out.read_text())["notes"])


def test_an_oversized_report_is_not_loaded(tmp_path):
    pulls = tmp_path / "pulls"
    pulls.mkdir()
    _write(pulls / "b1.jsonl", _report("b1"))
    big = _write(pulls / "b2.jsonl", _report("b2"))
    with big.open("r+b") as f:          # sparse: 300 MB on paper, nothing on disk
        f.truncate(300 * 1000 * 1000)
    out = tmp_path / "r.json"
    proc = _cli("--from-pull", str(pulls), "--report", str(out))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    row = _rows(out)["b2"]
    assert row["verdict"] == "fail" and "too large" in row["reason"]


def test_malformed_lines_are_skipped_and_counted_not_fatal(tmp_path):
    pulls = tmp_path / "pulls"
    pulls.mkdir()
    bad = ["not json at all", "[1, 2]", '{"event": "host"}', '{"event": "stats", "hosts": [1]}',
           '{"event": "host", "host": "b1", "status": "ok", "bytes_downloaded": "lots"}',
           json.dumps({**_verify("b1"), "edge_llm": {"kind": "verify", "ok": True, "models": "m"}}),
           json.dumps({**_verify("b1"), "edge_llm": {"kind": "verify", "ok": True, "qairt": [1, 2]}}),
           json.dumps({**_verify("b1", ok=False), "action": 5}),
           '{"event": "host", "host": "b1", "x": ' + "[" * 100000 + "]" * 100000 + "}",     # nested too deep
           '{"event": "host", "host": "b1", "status": "failed", "task": "t"']      # cut off
    with _write(pulls / "b1.jsonl", _report("b1"), extra="\n".join(bad) + "\n").open("ab") as f:
        f.write(b'{"event": "pull", "host": "b1", "url": "\xff\xfe"}\n')          # not UTF-8
    bad.append("not UTF-8")
    _write(pulls / "b2.jsonl", _report("b2", ok=False, reason="qairt missing"))
    out = tmp_path / "r.json"
    proc = _cli("--from-pull", str(pulls), "--report", str(out))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    rows = _rows(out)
    assert rows["b2"]["verdict"] == "fail" and rows["b2"]["reason"] == "qairt missing"
    assert rows["b1"]["details"]["pull"]["malformed_lines"] == len(bad)
    assert rows["b1"]["verdict"] != "pass" and f"{len(bad)} malformed" in rows["b1"]["reason"]
    assert f"b1.jsonl: {len(bad)} malformed line(s)" in proc.stderr
    assert rows["b1"]["release"] == "r1"                                # its good lines still count


HOSTILE = "[link=https://evil.example/x]click me[/link] \x1b[31mred\x1b]8;;https://evil.example\x07here\x1b]8;;\x07"


def test_board_text_reaches_the_terminal_escaped(tmp_path):
    pulls = tmp_path / "pulls"
    pulls.mkdir()
    _write(pulls / "b1.jsonl", _report("b1", ok=False, reason=HOSTILE, release="[bold]r1[/bold]"))
    _write(pulls / "b\x1b[2J.jsonl", _report("b\x1b[2J"))             # a file name is board text too
    proc = _cli("--from-pull", str(pulls))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "\x1b" not in proc.stdout and "\x07" not in proc.stdout
    assert "\x1b" not in proc.stderr
    assert "[link=https://evil.example/x]click me[/link]" in proc.stdout      # shown as text, not rendered
    assert "[bold]r1[/bold]" in proc.stdout
    assert "\\x1b[31mred" in proc.stdout                                      # visible, and harmless


def test_csv_cells_cannot_start_a_formula(tmp_path):
    pulls = tmp_path / "pulls"
    pulls.mkdir()
    formula = '=HYPERLINK("https://evil.example","update")'
    _write(pulls / "b1.jsonl", _report("b1", ok=False, reason="+cmd|' /C calc'!A0", release=formula))
    _write(pulls / "=2+5.jsonl", _report("=2+5"))
    out = tmp_path / "r.csv"
    proc = _cli("--from-pull", str(pulls), "--report", str(out))
    assert proc.returncode in (1, 2) and "Traceback" not in proc.stderr, proc.stderr
    cells = [c for row in csv.reader(io.StringIO(out.read_text())) for c in row]
    assert not [c for c in cells if c[:1] in ("=", "+", "-", "@", "\t", "\r")]
    assert "'" + formula in cells and "'+cmd|' /C calc'!A0" in cells


def test_a_directory_named_like_a_report_is_skipped(tmp_path):
    pulls = tmp_path / "pulls"
    pulls.mkdir()
    _write(pulls / "b1.jsonl", _report("b1"))
    (pulls / "x.jsonl").mkdir()
    out = tmp_path / "r.json"
    proc = _cli("--from-pull", str(pulls), "--report", str(out))
    assert proc.returncode == 0, proc.stderr
    assert list(_rows(out)) == ["b1"] and "x.jsonl: not a regular file" in proc.stderr


def test_a_fifo_in_the_pull_directory_does_not_hang_the_report(tmp_path):
    pulls = tmp_path / "pulls"
    pulls.mkdir()
    _write(pulls / "b1.jsonl", _report("b1"))
    os.mkfifo(pulls / "b2.jsonl")
    out = tmp_path / "r.json"
    try:
        proc = _cli("--from-pull", str(pulls), "--report", str(out), timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("fleet report hung on a FIFO")
    assert proc.returncode == 0, proc.stderr
    assert list(_rows(out)) == ["b1"] and "b2.jsonl: not a regular file" in proc.stderr


def test_symlinks_in_the_pull_directory_are_not_followed(tmp_path):
    pulls = tmp_path / "pulls"
    pulls.mkdir()
    _write(pulls / "b1.jsonl", _report("b1"))
    forged = _write(tmp_path / "elsewhere.jsonl", _report("b9"))
    (pulls / "b9.jsonl").symlink_to(forged)
    (pulls / "zero.jsonl").symlink_to("/dev/zero")
    out = tmp_path / "r.json"
    proc = _cli("--from-pull", str(pulls), "--report", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert list(_rows(out)) == ["b1"]
    assert "b9.jsonl: a symlink" in proc.stderr and "zero.jsonl: a symlink" in proc.stderr
