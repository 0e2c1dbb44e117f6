"""qcom_scm ``download_mode`` as the board reads it back: one mode, several kernel spellings.

What ``/sys/module/qcom_scm/parameters/download_mode`` prints depends on the kernel:

- mainline since the parameter became writable prints a name (Linux
  ``drivers/firmware/qcom/qcom_scm.c``, ``download_mode_name[]`` and ``get_download_mode()``, read at
  torvalds/linux 14062c267f09, v6.12-rc7): ``off``, ``full``, ``mini``, ``full,mini``, or
  ``unknown mode`` for a value it has no name for;
- vendor kernels keep it as an integer parameter and print ``0``/``1``;
- a ``bool`` parameter (mainline before the names) prints ``N``/``Y``.

The fleet's policy (``edge_llm_download_mode``) and the image's ``qcom_scm.download_mode=`` are mode
numbers, so every read-back is turned into the kernel's mode number here, in one place, and judged
as a number: ``off`` is 0 and ``full`` is 1 whichever way the kernel spells them.
"""

from __future__ import annotations

#: mode number -> the name mainline prints for it (qcom_scm.c download_mode_name[], indexed by
#: QCOM_DLOAD_NODUMP 0, QCOM_DLOAD_FULLDUMP 1, QCOM_DLOAD_MINIDUMP 2, QCOM_DLOAD_BOTHDUMP 3)
NAMES: dict[int, str] = {0: "off", 1: "full", 2: "mini", 3: "full,mini"}
_BY_NAME = {name: mode for mode, name in NAMES.items()}
_BOOL = {"n": 0, "y": 1}          # param_get_bool() prints N or Y


def mode(read_back: str | None) -> int | None:
    """The mode number a read-back means (``"full\\n"`` and ``"1"`` are both 1); None when the text is
    not a spelling any of those kernels prints (so a caller reports it instead of guessing)."""
    if read_back is None:
        return None
    text = read_back.strip().lower()
    if text.isdigit():
        return int(text)
    if text in _BY_NAME:
        return _BY_NAME[text]
    return _BOOL.get(text)


def describe(value: int | None) -> str:
    """A mode for people: ``1 (full)``, ``2 (mini)``."""
    if value is None:
        return "unknown"
    name = NAMES.get(value)
    return f"{value} ({name})" if name else str(value)
