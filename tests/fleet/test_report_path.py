"""A report the user asked for but that cannot be written is one line and exit 2, never an internal error."""

from __future__ import annotations

from tests.fleet.test_untrusted_inputs import inventory, run_cli


def test_a_report_in_a_missing_folder_is_refused_before_the_run(tmp_path, capsys):
    code, out = run_cli(capsys, "fleet", "verify", "-i", inventory(tmp_path), "--report", tmp_path / "no" / "r.json")
    assert code == 2
    assert "does not exist" in out and "ansible:" not in out          # refused before ansible ran


def test_a_report_that_is_a_folder_is_refused(tmp_path, capsys):
    code, out = run_cli(capsys, "fleet", "verify", "-i", inventory(tmp_path), "--report", tmp_path)
    assert code == 2 and "is a directory" in out.lower()   # click says so itself


def test_a_report_the_system_will_not_take_is_one_line(tmp_path, capsys):
    """/proc takes no new files, whoever asks: the run happens, the write fails, the user gets the reason."""
    code, out = run_cli(capsys, "fleet", "verify", "-i", inventory(tmp_path), "--report", "/proc/edge-llm-report.json")
    assert code == 2
    assert "cannot write the report /proc/edge-llm-report.json" in out or "not writable" in out
