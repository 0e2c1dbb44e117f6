"""The serial console of a virtual board: boot log, login, and a small root shell.

A real EVK's debug UART shows the XBL/UEFI banner, the kernel log, systemd units and finally a
getty (``Qualcomm Linux 2.0 <hostname> ttyMSM0`` / ``<hostname> login:``). The station logs in
as root there to read identity files, set ``download_mode`` and send ``reboot edl``. This module
reproduces that text and those commands on the master side of a pty, which the supervisor owns;
the station opens the slave (``boards/<serial>/console``) with pyserial exactly as it would open
``/dev/ttyUSB0``.

The password typed at the prompt is never echoed, logged or stored anywhere but compared with
the board's configured credential.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from provisioner.contracts import board as on_board
from provisioner.sim import qcom_scm
from provisioner.sim.board import UFS_SERIAL_PATH, VirtualBoard, env_number, ufs_serial

KERNEL = "6.18.0-qli"
REMOTEPROC_CRASH = re.compile(r"^/sys/kernel/debug/remoteproc/remoteproc\d+/crash$")
QLI_DEFAULT_MEMLOCK_KIB = 8192
GARBAGE = b"\x00\xff\xfe\x1b[0m\xe0\x80\x00\xc3\x10"


def login_delay() -> float:
    """Seconds ``login`` takes to print ``Password:`` (``PROVISIONER_SIM_LOGIN_DELAY_S``, default 0).

    On a loaded board getty hands the user name to ``login``, which needs a moment (PAM, fork)
    before it prints the prompt; whatever is typed meanwhile waits in the tty and is then read
    as the password. That is how a console driver that nudges the line too early gets refused.
    """
    return env_number("PROVISIONER_SIM_LOGIN_DELAY_S", 0.0)


def boot_banner(board: VirtualBoard) -> list[str]:
    """XBL / UEFI lines printed before the kernel starts."""
    b = board.catalog_board
    return [
        "Format: Log Type - Time(microsec) - Message - Optional Info",
        "Log Type: B - Since Boot(Power On Reset),  D - Delta,  S - Statistic",
        f"S - QC_IMAGE_VERSION_STRING=BOOT.MXF.2.4-00123-{b.soc_family.upper()}-1",
        "S - IMAGE_VARIANT_STRING=SocMonacoLAA" if b.codename == "monaco" else
        "S - IMAGE_VARIANT_STRING=SocLemansLAA",
        "B -      5124 - PBL, End",
        "B -     18760 - SBL1, Start",
        f"B -     31840 - UFS Boot LUN: {board.data.get('boot_lun') if board.data.get('boot_lun') is not None else 1}",
        "B -    412330 - SBL1, End",
        "UEFI Start     [  520]",
        " - 0x0A7001000 [  521] Sec.efi",
        f"UEFI Ver    : 6.0.250101.BOOT.MXF.2.4-00123-{b.soc_family.upper()}-1",
        f"Platform           : {b.name}",
        f"Chip Name          : {b.soc}",
        "Boot Device        : UFS",
        "Loading Image Start : 1612 ms",
        "Exit EBS        [ 2231] UEFI End",
    ]


def kernel_lines(board: VirtualBoard, cmdline: str) -> list[str]:
    b = board.catalog_board
    t = 0.0

    def k(msg: str, dt: float = 0.013) -> str:
        nonlocal t
        t += dt
        return f"[{t:12.6f}] {msg}"

    return [
        "[    0.000000] Booting Linux on physical CPU 0x0000000000 [0x411fd4e0]",
        f"[    0.000000] Linux version {KERNEL} (oe-user@oe-host) (aarch64-qcom-linux-gcc (GCC) 15.1.0) "
        "#1 SMP PREEMPT Thu Jan  1 00:00:00 UTC 2026",
        f"[    0.000000] Machine model: {b.dt_model}",
        f"[    0.000000] Kernel command line: {cmdline}",
        k(f"socinfo: ARM SoC ID {b.soc_id} ({b.soc0_machine})"),
        k("ufshcd-qcom 1d84000.ufshc: ufshcd_print_pwr_info:[RX, TX]: gear=[4, 4], lane[2, 2]", 0.4),
        k("scsi 0:0:0:49488: Well-known LUN    SAMSUNG  KLUFG8RHGB-B0E1  0500"),
        k("sd 0:0:0:0: [sda] Attached SCSI disk"),
        k(f"qcom_scm firmware:scm: download mode {'enabled' if board.data.get('download_mode') else 'disabled'}"),
        k("remoteproc remoteproc0: adsp is available", 0.2),
        k("remoteproc remoteproc1: cdsp is available"),
        k("qcom,fastrpc 1d000000.remoteproc:glink-edge.fastrpcglink-apps-dsp: fastrpc cdsp registered"),
        k("EXT4-fs (sda2): mounted filesystem with ordered data mode. Quota mode: none.", 0.3),
        k("systemd[1]: systemd 257 running in system mode (+PAM +AUDIT +SELINUX ...)", 0.1),
    ]


def systemd_lines(board: VirtualBoard) -> list[str]:
    return [
        "",
        "Welcome to Qualcomm Linux 2.0!",
        "",
        "[  OK  ] Started systemd-journald.service - Journal Service.",
        "[  OK  ] Started systemd-udevd.service - Rule-based Manager for Device Events and Files.",
        "[  OK  ] Reached target local-fs.target - Local File Systems.",
        "[  OK  ] Started systemd-networkd.service - Network Configuration.",
        f"[  OK  ] Started {on_board.FASTRPC_SERVICE} - cDSP RPC daemon.",
        "[  OK  ] Started sshd.socket - OpenSSH Server Socket.",
        "[  OK  ] Started serial-getty@ttyMSM0.service - Serial Getty on ttyMSM0.",
        "[  OK  ] Reached target multi-user.target - Multi-User System.",
    ]


def getty_banner(hostname: str, rootfs: Path | None = None) -> str:
    """What agetty prints: ``/etc/issue`` then ``/etc/issue.d/*.issue`` of the flashed image (escapes
    expanded), then ``<hostname> login:``. A board never flashed shows QLI's stock issue text."""
    issue = "Qualcomm Linux 2.0 \\n \\l\n\n"
    if rootfs is not None and (rootfs / "etc/issue").is_file():
        snippets = sorted((rootfs / "etc/issue.d").glob("*.issue"))
        parts = [rootfs / "etc/issue"] + [_in_rootfs(rootfs, p) for p in snippets]
        issue = "".join(p.read_text(encoding="utf-8", errors="replace") for p in parts if p.is_file())
        osr = os_release(rootfs)
    else:
        osr = {}
    text = _expand_issue(issue, hostname, osr)
    return "\r\n" + text.replace("\n", "\r\n") + f"{hostname} login: "


def _in_rootfs(rootfs: Path, path: Path) -> Path:
    """``path`` with an absolute symlink followed inside the board's root, as the board sees it."""
    if path.is_symlink():
        target = os.readlink(path)
        return rootfs / target.lstrip("/") if target.startswith("/") else path.parent / target
    return path


def os_release(rootfs: Path) -> dict[str, str]:
    """KEY=value pairs of the flashed image's /etc/os-release (quotes removed); {} when absent."""
    out: dict[str, str] = {}
    try:
        lines = (rootfs / on_board.OS_RELEASE.lstrip("/")).read_text(encoding="utf-8").splitlines()
    except OSError:
        return out
    for line in lines:
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip().strip('"')
    return out


def _expand_issue(text: str, hostname: str, osr: dict[str, str]) -> str:
    """The agetty escapes our images use: \\n host name, \\l tty, \\S / \\S{VAR} from os-release."""
    def sub(m: re.Match[str]) -> str:
        code, var = m.group(1), m.group(2)
        if code == "n":
            return hostname
        if code == "l":
            return "ttyMSM0"
        if code == "S":
            return osr.get(var, "") if var else osr.get("PRETTY_NAME", "Linux")
        return m.group(0)

    return re.sub(r"\\([nlS])(?:\{(\w+)\})?", sub, text)


def root_login_locked(board: VirtualBoard) -> bool:
    """A flashed image whose root password field is ``*``/``!`` (production): no password matches."""
    try:
        text = (board.rootfs_dir / "etc/shadow").read_text(encoding="utf-8")
    except OSError:
        return False
    for line in text.splitlines():
        fields = line.split(":")
        if fields[0] == "root" and len(fields) > 1:
            return fields[1].startswith(("*", "!"))
    return False


class Shell:
    """Login + root shell state machine of one board console (pure: bytes in, bytes out).

    ``write`` sends bytes to the console; ``actions`` are callbacks into the supervisor for
    things that change the board (reboot, crash) and ``later(delay, fn)`` to run ``fn`` after a
    delay without blocking the other boards. Input is ignored unless the board is booted and its
    getty is up (``enabled``); while ``login`` is starting (``held``) it waits, as in a real tty.
    """

    def __init__(self, board: VirtualBoard, write: Callable[[bytes], None],
                 actions: dict[str, Callable[..., None]]) -> None:
        self.board = board
        self.write = write
        self.actions = actions
        self.enabled = False
        self.mode = "login"       # login | password | shell
        self.user = ""
        self.buf = bytearray()
        self._last_cr = False
        self.held = False
        self.pending = b""

    # ---------------------------------------------------------------- session control
    def reset(self) -> None:
        """Power event: nobody is logged in any more."""
        self.enabled = False
        self.mode = "login"
        self.user = ""
        self.buf.clear()
        self.held = False
        self.pending = b""

    def start_getty(self) -> None:
        self.enabled = True
        self.mode = "login"
        self.write(getty_banner(self.hostname, self._flashed_rootfs()).encode())

    def _flashed_rootfs(self) -> Path | None:
        rootfs = self.board.rootfs_dir
        return rootfs if (rootfs / "etc").is_dir() else None

    @property
    def hostname(self) -> str:
        return self.board.data.get("hostname") or "qcom"

    @property
    def prompt(self) -> str:
        return f"root@{self.hostname}:~# "

    # ---------------------------------------------------------------- input
    def feed(self, data: bytes) -> None:
        if not self.enabled:
            return
        if self.held:
            self.pending += data
            return
        for i, ch in enumerate(data):
            if ch == 0x0A and self._last_cr:      # \r\n from a terminal: one Enter
                self._last_cr = False
                continue
            self._last_cr = ch == 0x0D
            if ch in (0x0D, 0x0A):
                line = bytes(self.buf).decode("utf-8", "replace")
                self.buf.clear()
                if self.mode != "password":
                    self.write(b"\r\n")
                self._line(line)
                if not self.enabled:
                    return
                if self.held:
                    self.pending += data[i + 1:]
                    return
            elif ch in (0x7F, 0x08):
                if self.buf:
                    self.buf.pop()
                    if self.mode != "password":
                        self.write(b"\b \b")
            elif ch == 0x03:                      # Ctrl-C
                self.buf.clear()
                if self.mode == "shell":
                    self.write(b"^C\r\n" + self.prompt.encode())
                else:
                    self.write(b"^C\r\n")
                    self.start_getty()
            elif ch == 0x04 and self.mode == "shell" and not self.buf:   # Ctrl-D
                self.write(b"logout\r\n")
                self.start_getty()
            elif ch >= 0x20 or ch == 0x09:
                self.buf.append(ch)
                if self.mode != "password":
                    self.write(bytes([ch]))

    def _line(self, line: str) -> None:
        if self.mode == "login":
            user = line.strip()
            if not user:         # agetty shows the issue text again on an empty line
                self.write(getty_banner(self.hostname, self._flashed_rootfs()).encode()[2:])
                return
            self.user = user
            self.mode = "password"
            delay = login_delay()
            if delay and "later" in self.actions:
                self.held = True
                self.actions["later"](delay, self._password_prompt)
            else:
                self.write(b"Password: ")
        elif self.mode == "password":
            self.write(b"\r\n")
            self.board.reload()
            ok = (self.user == "root" and not root_login_locked(self.board)
                  and line == (self.board.data.get("root_password") or ""))
            line = ""          # drop the secret as early as possible
            if ok:
                self.mode = "shell"
                self.write(f"root@{self.hostname}:~# ".encode())
            else:
                time.sleep(0.2)
                self.mode = "login"
                self.write(f"Login incorrect\r\n{self.hostname} login: ".encode())
        else:
            out = self.run(line)
            if out is None:          # the command took the board away (reboot, crash)
                return
            if out:
                self.write(out.replace(b"\n", b"\r\n") if b"\r\n" not in out else out)
            if self.mode == "shell" and self.enabled:
                self.write(self.prompt.encode())

    def _password_prompt(self) -> None:
        """``login`` is up: prompt, then read what was typed meanwhile (as the password)."""
        if not self.held:          # the board was reset meanwhile
            return
        self.held = False
        self.write(b"Password: ")
        queued, self.pending = self.pending, b""
        self.feed(queued)

    # ---------------------------------------------------------------- commands
    def run(self, line: str) -> bytes | None:
        """Execute one shell line; bytes to print, or None when the board went away."""
        text = line.strip()
        if not text or text.startswith("#"):
            return b""
        redirect = None
        m = re.match(r"^(.*?)\s*(>>?)\s*(\S+)\s*$", text)
        if m and not text.startswith(("cat ", "ls ")):
            text, redirect = m.group(1), m.group(3)
        try:
            argv = shlex.split(text)
        except ValueError:
            return b"-sh: syntax error: unterminated quoted string\n"
        if not argv:
            return b""
        cmd, args = argv[0], argv[1:]
        if redirect is not None:
            if cmd != "echo":
                return f"-sh: {cmd}: command not found\n".encode() if cmd not in _KNOWN else b""
            return self._write_file(redirect, " ".join(a for a in args if a != "-n"))
        handler = getattr(self, f"_cmd_{cmd.replace('-', '_')}", None)
        if handler is None:
            return f"-sh: {cmd}: command not found\n".encode()
        return handler(args)

    def _rootfs(self) -> Path:
        return self.board.rootfs_dir

    def _virtual(self, path: str) -> bytes | None:
        """Contents of kernel-provided files (sysfs, procfs, device tree) for this board."""
        b = self.board.catalog_board
        self.board.reload()
        data = self.board.data
        if path == on_board.SOC0_MACHINE:
            return f"{b.soc0_machine}\n".encode()
        if path == on_board.SOC0_SOC_ID:
            return f"{b.soc_id}\n".encode()
        if path == "/sys/devices/soc0/family":
            return b"Snapdragon\n"
        if path == on_board.SOC0_SERIAL:
            return f"{int(self.board.serial, 16)}\n".encode()
        if path == UFS_SERIAL_PATH:
            return f"{ufs_serial(self.board)}\n".encode()
        if path == on_board.DT_COMPATIBLE:
            return b"".join(c.encode() + b"\0" for c in b.dt_compatible)
        if path == on_board.DT_MODEL:
            return b.dt_model.encode() + b"\0"
        if path == on_board.DOWNLOAD_MODE_PARAM:
            return qcom_scm.show(int(data.get("download_mode") or 0), qcom_scm.names(data)).encode()
        if path == on_board.KERNEL_CMDLINE:
            return (self._cmdline() + "\n").encode()
        if path == "/proc/version":
            return f"Linux version {KERNEL} (oe-user@oe-host) #1 SMP PREEMPT\n".encode()
        if path == "/etc/hostname":
            return f"{self.hostname}\n".encode()
        return None

    def _cmdline(self) -> str:
        return read_cmdline(self.board)

    def _resolve(self, path: str) -> Path:
        clean = PurePosixPath("/") / path
        parts = [p for p in clean.parts[1:] if p not in ("..", ".")]
        return self._rootfs().joinpath(*parts) if parts else self._rootfs()

    def _glob(self, arg: str) -> list[str]:
        """What the shell makes of a ``*`` in an argument: the matching kernel files or rootfs paths,
        or the argument itself when nothing matches (as sh leaves an unmatched pattern)."""
        if "*" not in arg:
            return [arg]
        found = [p for p in (UFS_SERIAL_PATH,) if fnmatch.fnmatchcase(p, arg)]
        parent = PurePosixPath(arg).parent
        if "*" not in str(parent):
            base = self._resolve(str(parent))
            if base.is_dir():
                found += [str(parent / x.name) for x in sorted(base.iterdir())
                          if fnmatch.fnmatchcase(x.name, PurePosixPath(arg).name)]
        return found or [arg]

    def _cmd_cat(self, args: list[str]) -> bytes:
        out = b""
        for a in [x for arg in args for x in self._glob(arg)]:
            v = self._virtual(a)
            if v is not None:
                out += v
                continue
            p = self._resolve(a)
            if p.is_dir():
                out += b"cat: read error: Is a directory\n"
            elif p.is_file():
                out += p.read_bytes()
            else:
                out += f"cat: can't open '{a}': No such file or directory\n".encode()
        return out

    def _cmd_ls(self, args: list[str]) -> bytes:
        paths = [a for a in args if not a.startswith("-")] or ["/root"]
        out = []
        for a in paths:
            p = self._resolve(a)
            if p.is_dir():
                out.append("  ".join(sorted(x.name for x in p.iterdir())))
            elif p.exists() or p.is_symlink():
                out.append(a)
            else:
                out.append(f"ls: {a}: No such file or directory")
        return ("\n".join(x for x in out if x) + "\n").encode() if any(out) else b""

    def _write_file(self, path: str, value: str) -> bytes | None:
        value = value.strip()
        if path == on_board.DOWNLOAD_MODE_PARAM:
            mode = qcom_scm.store(value, qcom_scm.names(self.board.data))
            if mode is None:
                return b"-sh: echo: write error: Invalid argument\n"
            self.board.update(download_mode=mode)
            return b""
        if REMOTEPROC_CRASH.match(path):
            self.actions["crash"]()
            return None
        if path.startswith(("/sys/", "/proc/")):
            return f"-sh: can't create {path}: Permission denied\n".encode()
        p = self._resolve(path)
        if not p.parent.is_dir():
            return f"-sh: can't create {path}: nonexistent directory\n".encode()
        p.write_text(value + "\n", encoding="utf-8")
        return b""

    def _cmd_echo(self, args: list[str]) -> bytes:
        return (" ".join(a for a in args if a != "-n") + "\n").encode()

    def _cmd_reboot(self, args: list[str]) -> None:
        self.write(b"\r\n[  OK  ] Stopped target multi-user.target - Multi-User System.\r\n"
                   b"[  OK  ] Stopped sshd.socket - OpenSSH Server Socket.\r\n"
                   b"[  OK  ] Reached target shutdown.target - System Shutdown.\r\n")
        target = "edl" if args[:1] == ["edl"] else "booting"
        self.write(b"reboot: Restarting system with command 'edl'\r\n" if target == "edl"
                   else b"reboot: Restarting system\r\n")
        self.actions["power"](target)
        return None

    def _cmd_sim_crash(self, args: list[str]) -> None:
        """``sim-crash [cdsp]``: simulator-only shortcut for a cDSP fatal error."""
        self.actions["crash"]()
        return None

    def _cmd_ulimit(self, args: list[str]) -> bytes:
        if args[:1] in (["-l"], ["-Hl"], ["-Sl"]):
            return f"{memlock_limit(self.board)}\n".encode()
        if not args or args[:1] == ["-f"]:
            return b"unlimited\n"
        return b"unlimited\n" if args[0] == "-a" else b"-sh: ulimit: bad option\n"

    def _cmd_uname(self, args: list[str]) -> bytes:
        if "-a" in args:
            return (f"Linux {self.hostname} {KERNEL} #1 SMP PREEMPT Thu Jan  1 00:00:00 UTC 2026 aarch64 "
                    "GNU/Linux\n").encode()
        if "-r" in args:
            return f"{KERNEL}\n".encode()
        if "-m" in args:
            return b"aarch64\n"
        if "-n" in args:
            return f"{self.hostname}\n".encode()
        return b"Linux\n"

    def _cmd_hostname(self, args: list[str]) -> bytes:
        return f"{self.hostname}\n".encode()

    def _cmd_id(self, args: list[str]) -> bytes:
        return b"uid=0(root) gid=0(root) groups=0(root)\n"

    def _cmd_whoami(self, args: list[str]) -> bytes:
        return b"root\n"

    def _cmd_true(self, args: list[str]) -> bytes:
        return b""

    def _cmd_exit(self, args: list[str]) -> bytes:
        self.write(b"logout\r\n")
        self.start_getty()
        return b""

    _cmd_logout = _cmd_exit


_KNOWN = {"cat", "ls", "echo", "reboot", "ulimit", "uname", "hostname", "id", "whoami", "true", "exit", "logout",
          "sim-crash"}


def read_cmdline(board: VirtualBoard) -> str:
    """The kernel command line of the flashed image (the synthetic image keeps it in /etc/kernel/cmdline)."""
    try:
        return (board.rootfs_dir / "etc/kernel/cmdline").read_text(encoding="utf-8").strip()
    except OSError:
        return (f"root=PARTLABEL=rootfs rw rootwait console=ttyMSM0,115200n8 "
                f"qcom_scm.download_mode={int(board.data.get('download_mode') or 0)}")


def cmdline_download_mode(cmdline: str) -> int | None:
    m = re.search(r"qcom_scm\.download_mode=(\d)", cmdline)
    return int(m.group(1)) if m else None


def memlock_limit(board: VirtualBoard) -> str:
    """``ulimit -l`` of a root login shell: limits.d from the image, else QLI's 8192 KiB."""
    if board.has_fault("memlock"):
        return str(QLI_DEFAULT_MEMLOCK_KIB)
    value = None
    try:
        text = (board.rootfs_dir / on_board.LIMITS_FILE.lstrip("/")).read_text(encoding="utf-8")
    except OSError:
        text = ""
    for raw in text.splitlines():
        f = raw.split("#", 1)[0].split()
        if len(f) == 4 and f[0] in ("*", "root") and f[1] in ("soft", "-") and f[2] == "memlock":
            value = f[3]
    if value is None:
        return str(QLI_DEFAULT_MEMLOCK_KIB)
    return "unlimited" if value in ("unlimited", "infinity", "-1") else value


def crash_lines(board: VirtualBoard, download_mode: int) -> list[str]:
    """Kernel messages of a cDSP fatal error, ending the way ``download_mode`` decides."""
    up = time.monotonic() % 10000
    lines = [
        f"[{up:12.6f}] qcom_q6v5_pas 26300000.remoteproc: fatal error received: err_qdi.c:1296:EF:cdsp:1:"
        "PD crash",
        f"[{up + 0.001:12.6f}] remoteproc remoteproc1: crash detected in cdsp: type fatal error",
        f"[{up + 0.002:12.6f}] remoteproc remoteproc1: handling crash #1 in cdsp",
    ]
    if download_mode:
        lines += [f"[{up + 0.003:12.6f}] qcom_scm firmware:scm: download mode enabled: entering crash dump mode",
                  f"[{up + 0.004:12.6f}] Kernel panic - not syncing: cdsp subsystem failure"]
    else:
        lines += [f"[{up + 0.003:12.6f}] Kernel panic - not syncing: cdsp subsystem failure",
                  f"[{up + 0.004:12.6f}] reboot: Restarting system"]
    return lines
