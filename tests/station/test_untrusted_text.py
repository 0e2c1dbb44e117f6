"""Text that comes from boards, qdl or other stations is shown as text: never markup, never terminal controls."""

from __future__ import annotations

from provisioner import context
from provisioner.cli import main
from provisioner.station.records import Records


def test_history_shows_markup_and_escape_sequences_from_a_record_as_plain_text(tmp_path, capsys):
    db = tmp_path / "station.db"
    with Records(db) as rec:
        aid = rec.start_attempt("0AA94E00", slot="slot 0", board="iq-8275-evk", release_id="r1", artifacts={},
                                qdl_version="qdl 2.5", log_path=None)
        rec.finish_attempt(aid, "failed", error="closing [/x] tag [bold]b[/bold] \x1b]0;owned\x07\x1b[31mred\x9b")
    assert main(["station", "history", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "closing [/x] tag [bold]b[/bold]" in out
    assert "]0;owned" in out and "[31mred" in out     # the text stays, its control characters do not
    assert not any(ch in out for ch in "\x1b\x07\x9b")


def test_qdl_sees_no_secret_of_the_station_or_the_shell(tmp_path, monkeypatch):
    """qdl gets the whitelisted child environment: the dashboard token, the passwords and any
    other variable of the operator's shell stay out of it (and out of its log)."""
    from provisioner.station.qdl import detect_qdl

    seen = tmp_path / "env"
    fake = tmp_path / "qdl"
    fake.write_text(f"#!/bin/sh\nenv > '{seen}'\necho 'qdl version v2.5'\n")
    fake.chmod(0o755)
    for name in ("PROVISIONER_DASHBOARD_TOKEN", "STATION_RECORDS_PW", "EDGE_LLM_CONSOLE_PASSWORD", "AWS_SECRET"):
        monkeypatch.setenv(name, "s3cr3t-" + name)
    monkeypatch.setenv("LIBUSB_DEBUG", "4")
    assert detect_qdl(str(fake), context.current().env).version == "2.5"
    env = seen.read_text()
    assert "s3cr3t" not in env
    assert "LIBUSB_DEBUG=4" in env and "PATH=" in env


def test_a_secret_file_that_is_not_text_is_one_line_showing_none_of_it(tmp_path, capsys):
    from provisioner.errors import StationError
    from provisioner.station.central import parse_settings
    from provisioner.station.config import Credential

    secret = tmp_path / "tok"
    secret.write_bytes(b"\xff\xfe\xab" + b"k" * 30)
    db = tmp_path / "station.db"
    assert main(["station", "dashboard", "--db", str(db), "--token-file", str(secret)]) == 2
    err = capsys.readouterr().err
    assert f"dashboard token file {secret} is not UTF-8 text" in err
    assert "Traceback" not in err and "0xff" not in err and "kkk" not in err
    central = parse_settings({"records": "postgresql://st@127.0.0.1:1/h", "records_password_file": str(secret)},
                             tmp_path, "station.yaml")
    for read in (Credential(file=secret).secret, central.password, Credential(file=tmp_path).secret):
        try:
            read({})
        except StationError as exc:
            assert "password file" in str(exc) and "0xff" not in str(exc) and "kkk" not in str(exc)
        else:
            raise AssertionError(f"{read} read a secret file that is not text")
