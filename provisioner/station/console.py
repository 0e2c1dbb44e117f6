"""Serial console driver (pyserial): log in, run commands, read identity, send a board to EDL.

Why markers: a serial console is a byte stream shared with kernel messages and the terminal's
echo of what we type. Each command is wrapped in two ``printf`` markers whose text only exists
once the shell has run them (the echoed command line has them split), so output and exit status
are delimited exactly, whatever garbage or boot chatter surrounds them.

The password comes from :class:`provisioner.station.config.Credential` and is written to the
port only; it is never logged, echoed into a record or put in an exception message.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import serial

from provisioner.contracts import board as on_board
from provisioner.contracts import download_mode
from provisioner.errors import StationError
from provisioner.station import identity as board_identity
from provisioner.station.config import Credential

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Za-z0-9]")
LOGIN_RE = re.compile(r"(?:^|[\r\n])[^\r\n]*login:\s*$")
LOGIN_HOST_RE = re.compile(r"(?:^|\n)([A-Za-z0-9][A-Za-z0-9._-]*) login:\s*$")
PASSWORD_RE = re.compile(r"(?i)password:\s*$")
SHELL_RE = re.compile(r"[#$]\s*$")
PROMPT_LINE_RE = re.compile(r"(?:^|\n)[\w.@:~/-]*[#$] ?$")   # a whole line that is only a prompt
INCORRECT_RE = re.compile(r"Login incorrect|Permission denied", re.I)


class LoginRefused(StationError):
    """Root cannot log in on this console: wrong or missing password, or an image that disables
    root login (production). Callers that only need the release fall back to the banner."""


BANNER_RE = re.compile(re.escape(on_board.BANNER_RELEASE_PREFIX) + r"(\S+)")
BANNER_SOURCE = "console banner"   # identity["source"] when only the getty banner could be read


@dataclass
class CommandResult:
    command: str
    status: int | None  # None: the shell did not expand $?
    output: str

    @property
    def ok(self) -> bool:
        if self.status is None:
            return not re.match(r"^(-?sh: |\S+: can't |\S+: .*No such file)", self.output)
        return self.status == 0


def _is_url(port: str) -> bool:
    return "://" in port


ANSWER_WAIT_S = 8.0    # how long a typed user name or password may go unanswered before we start over


class ConsoleDriver:
    """One board's serial console. Use as a context manager; :meth:`open` maps pyserial errors
    (no such port, port busy) to one-line :class:`StationError`s naming the port."""

    def __init__(self, port: str, *, env: Mapping[str, str], baudrate: int = 115200,
                 credential: Credential | None = None, prompt_timeout_s: float = 15.0, log_path: Path | None = None,
                 on_text: Callable[[str], None] | None = None) -> None:
        self.port = port
        self.env = env              # the run's environment: where the credential's variable is read
        self.baudrate = baudrate
        self.credential = credential or Credential()
        self.prompt_timeout_s = prompt_timeout_s
        self.log_path = log_path
        self.on_text = on_text
        self.ser: Any = None
        self._buf = ""
        self._log: Any = None
        self.logged_in = False
        self.prompt: str | None = None
        self.banner: str | None = None        # release id from the last getty banner seen
        self.banner_host: str | None = None   # host name agetty put before "login:"
        self.banner_identity: dict[str, Any] = {}   # serial / host keys from the banner's identity lines

    # -- port handling -------------------------------------------------------------------
    def open(self) -> ConsoleDriver:
        if not _is_url(self.port) and not os.path.exists(self.port):
            raise StationError(f"console {self.port} does not exist",
                               "check the USB-serial cable and consoles: in station.yaml")
        try:
            if _is_url(self.port):
                self.ser = serial.serial_for_url(self.port, baudrate=self.baudrate, timeout=0.05)
            else:
                self.ser = serial.Serial(self.port, baudrate=self.baudrate, timeout=0.05, exclusive=True)
        except serial.SerialException as exc:
            text = str(exc)
            if "lock" in text.lower() or "busy" in text.lower() or "Resource temporarily" in text:
                raise StationError(f"console {self.port} is busy (another program has it open)",
                                   "close minicom/screen/picocom or the other station process") from None
            raise StationError(f"console {self.port} cannot be opened ({text})",
                               "check permissions (dialout group) and the cable") from None
        if self.log_path:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = open(self.log_path, "a", encoding="utf-8", errors="replace")  # noqa: SIM115
        return self

    def close(self) -> None:
        if self.ser is not None:
            with contextlib.suppress(Exception):
                self.ser.close()
            self.ser = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> ConsoleDriver:
        return self.open() if self.ser is None else self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _reopen(self, deadline: float) -> None:
        """The tty went away (board reset, pty re-created): reopen it until ``deadline``."""
        with contextlib.suppress(Exception):
            self.ser.close()
        self.ser = None
        while time.monotonic() < deadline:
            try:
                if _is_url(self.port):
                    self.ser = serial.serial_for_url(self.port, baudrate=self.baudrate, timeout=0.05)
                else:
                    self.ser = serial.Serial(self.port, baudrate=self.baudrate, timeout=0.05, exclusive=True)
                return
            except (serial.SerialException, OSError):
                time.sleep(0.2)
        raise StationError(f"console {self.port} disappeared and did not come back", "check the cable")

    # -- raw I/O -------------------------------------------------------------------------
    def write(self, text: str, *, secret: bool = False) -> None:
        """Send ``text``; ``secret`` text is never logged."""
        try:
            self.ser.write(text.encode())
            self.ser.flush()
        except (serial.SerialException, OSError) as exc:
            raise StationError(f"console {self.port}: write failed ({exc})", "check the cable") from None
        if self._log and not secret:
            lines = [ln for ln in text.replace("\n", "\r").split("\r") if ln.strip()]
            self._log.write("".join(f"\n[sent] {ln}" for ln in lines) + "\n")

    def _read_some(self, deadline: float) -> str:
        try:
            data = self.ser.read(max(1, self.ser.in_waiting or 1))
        except (serial.SerialException, OSError, TypeError):
            self._reopen(deadline)
            return ""
        if not data:
            return ""
        text = data.decode("utf-8", errors="replace")
        if self._log:
            self._log.write(text)
            self._log.flush()
        if self.on_text:
            self.on_text(text)
        self._buf += text
        if len(self._buf) > 1_000_000:
            self._buf = self._buf[-200_000:]
        return text

    def expect(self, patterns: dict[str, re.Pattern[str]], timeout_s: float) -> tuple[str, str] | None:
        """Read until one pattern matches the (ANSI-stripped) tail of what was read.

        Returns (name, text read so far) and consumes it, or None on timeout.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            clean = _ANSI.sub("", self._buf).replace("\r", "")
            for name, pat in patterns.items():
                if pat.search(clean):
                    self._buf = ""
                    return name, clean
            if time.monotonic() >= deadline:
                return None
            self._read_some(deadline)

    def drain(self, quiet_s: float = 0.2) -> str:
        """Read until the line has been quiet for ``quiet_s`` (drops pending boot chatter)."""
        out = ""
        last = time.monotonic()
        end = last + 5.0
        while time.monotonic() - last < quiet_s and time.monotonic() < end:
            got = self._read_some(end)
            if got:
                out += got
                last = time.monotonic()
        self._buf = ""
        return out

    # -- login ---------------------------------------------------------------------------
    def ensure_shell(self, timeout_s: float | None = None) -> None:
        """Get to a root shell: nudge the line, answer login/password prompts, or notice we are
        already logged in. Verified by running a marker command.

        Why the line is only nudged while nothing is typed: a loaded board can take seconds to
        answer the user name. An Enter sent meanwhile reaches ``login`` as an empty password,
        the real password then lands at the next ``login:`` prompt, where getty echoes it onto
        the console (and into every log). So after typing we wait, and the secret is only sent
        to a ``Password:`` prompt that follows our own user name.
        """
        timeout_s = timeout_s or self.prompt_timeout_s
        if self.ser is None:
            self.open()
        deadline = time.monotonic() + timeout_s
        typed = ""            # "" nothing pending | "user" | "password"
        typed_at = 0.0
        abandoned = False     # we sent Enter to a password prompt that was not ours
        refused = 0
        self.drain(0.1)
        self.write("\r")
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                waiting = {"user": "no password prompt after the user name",
                           "password": "no shell after the password"}.get(typed, "no login or shell prompt")
                raise StationError(f"console {self.port}: {waiting} within {timeout_s:g} s",
                                   "check the cable and baud rate, and that the board is powered and booted")
            got = self.expect({"incorrect": INCORRECT_RE, "password": PASSWORD_RE, "login": LOGIN_RE,
                               "shell": SHELL_RE}, min(left, 1.5))
            if got is None:
                if not typed or time.monotonic() - typed_at > ANSWER_WAIT_S:
                    typed = ""
                    self.write("\r")
                continue
            kind, seen = got
            self._note_banner(seen)
            if kind == "incorrect":
                typed = ""
                if abandoned:
                    abandoned = False
                    continue
                # Line noise can spoil one attempt; a wrong password fails every time.
                refused += 1
                if refused >= 2:
                    raise self._refused()
                continue
            if kind == "login":
                if typed == "user" and time.monotonic() - typed_at < ANSWER_WAIT_S:
                    # A prompt queued before our user name (getty re-printed its banner, or an
                    # earlier nudge, however late a stalled board prints it): typing the user
                    # name again would answer the password prompt that is on its way.
                    continue
                if typed == "password":
                    refused += 1
                    if refused >= 2:
                        raise self._refused()
                self.drain(0.3)   # swallow further queued prompts before typing
                self.write(self.credential.user + "\r")
                typed, typed_at = "user", time.monotonic()
            elif kind == "password":
                if typed != "user":
                    # Someone else's half-finished login: end it with an empty password.
                    self.write("\r")
                    typed, abandoned = "", True
                    continue
                secret = self.credential.secret(self.env)
                if secret is None:
                    raise LoginRefused(f"console {self.port} asks for a password and none is configured",
                                       f"set {self.credential.describe()}")
                self.write(secret + "\r", secret=True)
                typed, typed_at = "password", time.monotonic()
            elif kind == "shell":
                tail = got[1].rstrip("\n").rsplit("\n", 1)[-1]
                if 0 < len(tail) <= 80:
                    self.prompt = tail
                try:
                    res = self.run("true", timeout_s=min(max(left, 2.0), 15.0), _check_shell=False)
                except StationError:
                    typed = ""
                    self.write("\r")
                    continue
                if res.ok:
                    self.logged_in = True
                    return

    def _refused(self) -> LoginRefused:
        if self.banner:
            return LoginRefused(f"console {self.port}: login as {self.credential.user} was refused on a board "
                                f"running release {self.banner}",
                                "production images disable root on the console: use SSH with the fleet key "
                                f"(or a debug image); on a debug image check {self.credential.describe()}")
        return LoginRefused(f"console {self.port}: login as {self.credential.user} was refused",
                            f"check the password in {self.credential.describe()}")

    def run(self, command: str, *, timeout_s: float = 30.0, _check_shell: bool = True) -> CommandResult:
        """Run ``command`` in the board's shell; output and exit status delimited by markers.

        Three lines are typed: ``echo __PVB_''<tag>``, the command, ``echo __PVE_''<tag>:$?``.
        The empty quotes make the echoed input differ from the printed marker, and separate lines
        keep it working on minimal shells (busybox ash, recovery shells) without ``;`` handling.
        A shell that does not expand ``$?`` gives ``status=None``.
        """
        if _check_shell and not self.logged_in:
            self.ensure_shell()
        tag = uuid.uuid4().hex[:10]
        begin = f"__PVB_{tag}\n"
        end_re = re.compile(rf"__PVE_{tag}:(\S*)\n")
        self._buf = ""
        self.write(f"echo __PVB_''{tag}\r{command}\recho __PVE_''{tag}:$?\r")
        got = self.expect({"end": end_re}, timeout_s)
        if got is None:
            raise StationError(f"console {self.port}: command '{command}' did not finish within {timeout_s:g} s",
                               "is the board hung? check the console log")
        text = got[1]
        m = end_re.search(text)
        assert m is not None
        start = text.rfind(begin, 0, m.start())
        body = text[start + len(begin):m.start()] if start >= 0 else ""
        body = self._clean(body, command, f"echo __PVE_''{tag}")
        status = int(m.group(1)) if m.group(1).isdigit() else None
        return CommandResult(command, status, body)

    def _clean(self, body: str, command: str, end_echo: str) -> str:
        """Remove what the terminal added around the output: the echo of the typed lines and
        prompts (where they appear depends on whether the shell or the tty does the echo)."""
        prompt = self.prompt or ""
        out = ""
        lines = body.split("\n")
        for i, line in enumerate(lines):
            if end_echo in line:
                head = line[:line.index(end_echo)]
                if prompt and head.endswith(prompt):
                    head = head[:-len(prompt)]
                out += head
                continue
            if i == 0 and line.rstrip().endswith(command.strip()):
                continue
            if i == len(lines) - 1:
                out += line
            else:
                out += line + "\n"
        if prompt:
            out = out.removeprefix(prompt)
            out = out.removesuffix(prompt)
        return out

    def read_file(self, path: str, *, timeout_s: float = 10.0) -> str | None:
        res = self.run(f"cat {path}", timeout_s=timeout_s)
        return res.output.replace("\x00", "\n").strip() if res.ok else None

    # -- board operations ----------------------------------------------------------------
    def identity(self) -> dict[str, Any]:
        """What the running board says it is: soc0 machine, id and serial, UFS serial, SSH host
        keys, DT compatible, os-release (BUILD_ID), download_mode, hostname, IPv4 address.

        Serials and keys are validated by :mod:`provisioner.station.identity` (a board's output is
        untrusted); what fails the check is left out."""
        ident: dict[str, Any] = {"console": self.port}
        ident["machine"] = self.read_file(on_board.SOC0_MACHINE)
        soc_id = self.read_file(on_board.SOC0_SOC_ID)
        ident["soc_id"] = int(soc_id) if soc_id and soc_id.isdigit() else soc_id
        ident["serial"] = board_identity.soc_serial(self.read_file(on_board.SOC0_SERIAL))
        ident["ufs_serial"] = board_identity.ufs_serial(self.read_file(on_board.UFS_SERIAL_GLOB))
        keys = self.run(f"cat {on_board.SSH_HOST_KEY_GLOB}")
        ident["host_keys"] = [k.as_dict() for k in board_identity.host_keys_from_text(keys.output)] if keys.ok else []
        for key in ("ufs_serial", "host_keys"):     # e.g. keys under /var/run/ssh: the banner's lines cover it
            ident[key] = ident[key] or self.banner_identity.get(key) or ident[key]
        compat = self.read_file(on_board.DT_COMPATIBLE) or ""
        ident["compatible"] = [c.strip() for c in compat.splitlines() if c.strip()]
        osr = self.read_file(on_board.OS_RELEASE) or ""
        os_release: dict[str, str] = {}
        for line in osr.splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip().isidentifier():
                os_release[key.strip()] = value.strip().strip('"')
        ident["os_release"] = os_release
        ident["build_id"] = os_release.get("BUILD_ID")
        dm = self.read_file(on_board.DOWNLOAD_MODE_PARAM)
        mode = download_mode.mode(dm)               # "full" and "1" are the same mode
        ident["download_mode"] = mode if mode is not None else dm
        host = self.run("hostname")
        ident["hostname"] = host.output.strip().splitlines()[-1] if host.ok and host.output.strip() else None
        ip = self.run("ip -4 -o addr show scope global")
        addrs = re.findall(r"inet (\d+\.\d+\.\d+\.\d+)/", ip.output) if ip.ok else []
        ident["ip"] = addrs[0] if addrs else None
        return ident

    def identity_or_banner(self, timeout_s: float | None = None) -> tuple[dict[str, Any], str | None]:
        """(identity, None) after a root login; where root is refused but a getty banner named the
        release (production images), (what the banner shows, why login was not possible)."""
        try:
            self.ensure_shell(timeout_s)
            return self.identity(), None
        except LoginRefused as exc:
            if self.banner is None:
                raise
            return ({"console": self.port, "build_id": self.banner, "hostname": self.banner_host,
                     "source": BANNER_SOURCE, "host_keys": [], **self.banner_identity}, exc.message)

    def reboot_edl(self) -> None:
        """``reboot edl`` as root: the board drops off the console and re-enumerates as 05c6:9008."""
        if not self.logged_in:
            self.ensure_shell()
        self.write("reboot edl\r")
        self.logged_in = False
        self.drain(0.3)

    def set_download_mode(self, value: int) -> int | None:
        """Write the qcom_scm download_mode parameter (1 = crash dumps to EDL 900e); returns the mode
        read back (a number, however the kernel spells it).

        The digit is what every kernel takes: mainline's set_download_mode() falls back to kstrtobool
        for anything that is not a name (qcom_scm.c at torvalds/linux 14062c267f09)."""
        if value not in (0, 1):
            raise StationError(f"download_mode must be 0 or 1, not {value}", "use --download-mode 0|1")
        res = self.run(f"echo {value} > {on_board.DOWNLOAD_MODE_PARAM}")
        if not res.ok:
            raise StationError(f"console {self.port}: cannot set download_mode ({res.output.strip()[:100]})",
                               "is qcom_scm loaded and are we root?")
        return download_mode.mode(self.read_file(on_board.DOWNLOAD_MODE_PARAM))

    def wait_for_boot(self, timeout_s: float = 120.0) -> str:
        """Capture the boot log until a login prompt (or an autologin shell prompt) appears;
        remembers the banner's release."""
        self.logged_in = False
        got = self.expect({"login": LOGIN_RE, "shell": PROMPT_LINE_RE}, timeout_s)
        if got is None:
            raise StationError(f"console {self.port}: board did not reach a login prompt within {timeout_s:g} s",
                               "check the boot log in the station log folder")
        self._note_banner(got[1])
        return got[1]

    def _note_banner(self, text: str) -> None:
        """Remember what the getty banner in ``text`` (already ANSI-free) says: the last
        ``edge-llm release <BUILD_ID>`` line and the host name before ``login:``."""
        found = BANNER_RE.findall(text)
        if found:
            self.banner = found[-1]
        ident = board_identity.parse_banner(text)
        if ident:
            self.banner_identity = ident
        m = LOGIN_HOST_RE.search(text)
        if m:
            self.banner_host = m.group(1)
