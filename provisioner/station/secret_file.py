"""Reading a secret from a file: the one rule for the dashboard token and both passwords.

A secret file is UTF-8 text. Anything else (unreadable, a folder, random bytes written with
``head -c 32 /dev/urandom``) is one clear line naming the file and what it should hold, and no
part of its content: a decoding error's text quotes the offending byte, which would put a piece
of the secret into a warning or a log.
"""

from __future__ import annotations

from pathlib import Path

from provisioner.errors import StationError


def read_secret_file(path: Path, what: str, hint: str) -> str:
    """The file's text, without its trailing line end; ``what`` names it in the message
    (``"dashboard token file"``), ``hint`` says what to fix."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise StationError(f"{what} {path} is unreadable ({exc.strerror})", hint) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise StationError(f"{what} {path} is not UTF-8 text", hint + " (a secret file holds one line of text)"
                           ) from None
    return text.rstrip("\r\n")
