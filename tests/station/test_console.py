"""Console driver over real ptys: login, markers, garbage, already logged in, no prompt, busy port."""

from __future__ import annotations

import pytest

from provisioner import context
from provisioner.errors import StationError
from provisioner.station.config import Credential
from provisioner.station.console import ConsoleDriver

from .fakeconsole import FakeConsole


@pytest.fixture
def fake(request):
    fc = FakeConsole(**getattr(request, "param", {}))
    yield fc
    fc.close()


def test_login_run_and_exit_status(fake, monkeypatch, tmp_path):
    monkeypatch.setenv("PROVISIONER_CONSOLE_PASSWORD", "s3cret")
    log = tmp_path / "console.log"
    with ConsoleDriver(fake.port, env=context.current().env, credential=Credential(), prompt_timeout_s=5,
                       log_path=log) as con:
        con.ensure_shell()
        res = con.run("echo hello; echo world")
        assert (res.status, res.output) == (0, "hello\nworld\n")
        res = con.run("echo oops >&2; exit_code() { return 3; }; exit_code")
        assert res.status == 3 and "oops" in res.output
    assert fake.state == "shell"
    assert "s3cret" not in log.read_text()


@pytest.mark.parametrize("fake", [{"garbage": b"\x00\xff\xfe#$ junk U-Boot \x1b[0m\r\n\x07"}], indirect=True)
def test_garbage_on_the_line_is_tolerated(fake, monkeypatch):
    monkeypatch.setenv("PROVISIONER_CONSOLE_PASSWORD", "s3cret")
    with ConsoleDriver(fake.port, env=context.current().env, prompt_timeout_s=5) as con:
        assert con.run("printf 'a\\tb'").output == "a\tb"


@pytest.mark.parametrize("fake", [{"logged_in": True}], indirect=True)
def test_already_logged_in_board_needs_no_password(fake, monkeypatch):
    monkeypatch.delenv("PROVISIONER_CONSOLE_PASSWORD", raising=False)
    with ConsoleDriver(fake.port, env=context.current().env, prompt_timeout_s=5) as con:
        assert con.run("echo $((6*7))").output.strip() == "42"
    assert b"root\r" not in fake.received  # no login attempted


def test_wrong_password_is_a_clear_error(fake, monkeypatch):
    monkeypatch.setenv("PROVISIONER_CONSOLE_PASSWORD", "wrong")
    with ConsoleDriver(fake.port, env=context.current().env,
                       prompt_timeout_s=5) as con, pytest.raises(StationError) as exc:
        con.ensure_shell()
    assert "refused" in str(exc.value) and "wrong" not in str(exc.value)
    assert "PROVISIONER_CONSOLE_PASSWORD" in str(exc.value)


def test_password_needed_but_not_configured(fake, monkeypatch):
    monkeypatch.delenv("PROVISIONER_CONSOLE_PASSWORD", raising=False)
    with ConsoleDriver(fake.port, env=context.current().env, prompt_timeout_s=5) as con, \
            pytest.raises(StationError, match="no.*configured|none"):
        con.ensure_shell()


def test_password_from_file(fake, tmp_path, monkeypatch):
    monkeypatch.delenv("PROVISIONER_CONSOLE_PASSWORD", raising=False)
    pw = tmp_path / "pw"
    pw.write_text("s3cret\n")
    with ConsoleDriver(fake.port, env=context.current().env, credential=Credential(env=None, file=pw),
                       prompt_timeout_s=5) as con:
        assert con.run("true").ok


@pytest.mark.parametrize("fake", [{"silent": True}], indirect=True)
def test_board_that_never_prints_a_prompt_names_the_port(fake):
    with ConsoleDriver(fake.port, env=context.current().env,
                       prompt_timeout_s=1.5) as con, pytest.raises(StationError) as exc:
        con.ensure_shell()
    assert fake.port in str(exc.value) and "no login or shell prompt" in str(exc.value)


def test_missing_and_busy_ports(fake, tmp_path):
    with pytest.raises(StationError, match="does not exist"):
        ConsoleDriver(str(tmp_path / "ttyUSB9"), env=context.current().env).open()
    with ConsoleDriver(fake.port, env=context.current().env) as _first, pytest.raises(StationError, match="busy"):
        ConsoleDriver(fake.port, env=context.current().env).open()


def test_command_timeout_names_port_and_command(fake, monkeypatch):
    monkeypatch.setenv("PROVISIONER_CONSOLE_PASSWORD", "s3cret")
    with ConsoleDriver(fake.port, env=context.current().env, prompt_timeout_s=5) as con:
        con.ensure_shell()
        with pytest.raises(StationError, match=r"command 'sleep 3' did not finish within 0.5 s"):
            con.run("sleep 3", timeout_s=0.5)
