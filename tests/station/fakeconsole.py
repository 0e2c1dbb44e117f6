"""A tiny serial-console peer for unit tests of the pyserial driver (before/besides the virtual
boards): the master side of a real pty that behaves like getty + login + a shell.

Commands are run by ``sh -c`` on the host, so exit statuses and output are real.
"""

from __future__ import annotations

import os
import select
import subprocess
import threading


class FakeConsole:
    def __init__(self, *, password: str | None = "s3cret", logged_in: bool = False, garbage: bytes = b"",
                 silent: bool = False, hostname: str = "fake") -> None:
        self.master, self.slave = os.openpty()
        self.port = os.ttyname(self.slave)
        self.password = password
        self.state = "shell" if logged_in else "login"
        self.garbage = garbage
        self.silent = silent
        self.prompt = f"root@{hostname}:~# "
        self.received = b""
        self.commands: list[str] = []
        self.status = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def close(self) -> None:
        # The thread must be gone before the descriptors are closed: a thread still inside a command
        # (up to its 5 s timeout) would otherwise write its output and prompt into whatever the next
        # test opens under the same fd numbers - a virtual board's console, typed as if by the station.
        self._stop.set()
        self._thread.join()
        for fd in (self.master, self.slave):
            try:
                os.close(fd)
            except OSError:
                pass

    def _send(self, data: str | bytes) -> None:
        if self._stop.is_set():
            return
        if isinstance(data, str):
            data = data.replace("\n", "\r\n").encode()
        try:
            os.write(self.master, data)
        except OSError:
            pass  # closed by the test while a command was still running

    def _loop(self) -> None:
        line = b""
        user = None
        first = True
        while not self._stop.is_set():
            r, _, _ = select.select([self.master], [], [], 0.05)
            if not r:
                continue
            try:
                data = os.read(self.master, 4096)
            except OSError:
                return
            self.received += data
            if self.silent:
                continue
            for ch in data:
                b = bytes([ch])
                if b not in (b"\r", b"\n"):
                    line += b
                    if self.state != "password":
                        self._send(b)  # terminal echo
                    continue
                text = line.decode(errors="replace")
                line = b""
                self._send("\n")
                if first and self.garbage:
                    self._send(self.garbage)
                first = False
                if self.state == "login":
                    if text.strip():
                        user = text.strip()
                        if self.password is None:
                            self.state = "shell"
                            self._send(self.prompt)
                        else:
                            self.state = "password"
                            self._send("Password: ")
                    else:
                        self._send("fake login: ")
                elif self.state == "password":
                    if user == "root" and text == self.password:
                        self.state = "shell"
                        self._send("Last login: never\n" + self.prompt)
                    else:
                        self.state = "login"
                        self._send("\nLogin incorrect\nfake login: ")
                else:
                    if text.strip():
                        self.commands.append(text)
                        text = text.replace("$?", str(self.status))  # a persistent shell's last status
                        cp = subprocess.run(["sh", "-c", text], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                            text=True, timeout=5)
                        self.status = cp.returncode
                        self._send(cp.stdout)
                    self._send(self.prompt)
