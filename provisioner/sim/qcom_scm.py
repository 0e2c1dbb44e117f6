"""The virtual board's qcom_scm ``download_mode`` parameter, as the two kinds of kernel present it.

A board whose ``board.json`` has ``"qcom_scm_names": true`` runs a kernel like mainline's
(Linux drivers/firmware/qcom/qcom_scm.c at torvalds/linux 14062c267f09, v6.12-rc7):
``get_download_mode()`` prints ``download_mode_name[mode]`` (``off``, ``full``, ``mini``,
``full,mini``) or ``unknown mode``, and ``set_download_mode()`` takes one of those names or, failing
that, anything ``kstrtobool()`` reads (``0``/``1``, ``y``/``n``, ``on``/``off``) as 0 or 1. Other boards
run a vendor kernel with an integer parameter: it prints and takes ``0``/``1``.

Written from the kernel source, not from the fleet's reader, so verify is tested against what a board
shows rather than against itself.
"""

from __future__ import annotations

from typing import Any

# qcom_scm.c download_mode_name[], indexed by QCOM_DLOAD_NODUMP/FULLDUMP/MINIDUMP/BOTHDUMP
_NAMES = ("off", "full", "mini", "full,mini")


def names(data: dict[str, Any]) -> bool:
    """Whether this board's kernel spells download_mode by name (board.json ``qcom_scm_names``)."""
    return bool(data.get("qcom_scm_names"))


def show(mode: int, by_name: bool) -> str:
    """What ``cat /sys/module/qcom_scm/parameters/download_mode`` prints (with its newline)."""
    if not by_name:
        return f"{int(mode)}\n"
    return f"{_NAMES[mode]}\n" if 0 <= mode < len(_NAMES) else "unknown mode\n"


def _kstrtobool(text: str) -> int | None:
    # lib/kstrtox.c kstrtobool(): y/Y/t/T/1 and n/N/f/F/0 by the first character, on/off by two
    if not text:
        return None
    first = text[0].lower()
    if first in "yt1":
        return 1
    if first in "nf0":
        return 0
    if first == "o" and len(text) > 1:
        return {"n": 1, "f": 0}.get(text[1].lower())
    return None


def store(text: str, by_name: bool) -> int | None:
    """The mode a write of ``text`` sets, or None when the kernel refuses it (EINVAL)."""
    value = text.strip()
    if by_name:
        if value in _NAMES:                        # sysfs_match_string(download_mode_name, val)
            return _NAMES.index(value)
        return _kstrtobool(value)
    return int(value) if value in ("0", "1") else None
