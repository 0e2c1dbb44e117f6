"""Pull mode (``pull.yml`` installs it, boards run ``local.yml`` on themselves): the controller's side.

Boards behind NAT run the fleet playbooks on a timer through ``ansible-pull`` and upload
``<board>.jsonl``: one ``pull`` line (url, branch, commit, rc), then the ``edge_llm.fleet.events`` lines
of the run. :func:`from_pull` turns a directory of those uploads into the same report rows a push run
gets (:func:`provisioner.fleet.shared.report.row_for`), reading each file as untrusted input.
"""

from __future__ import annotations

import io
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provisioner.fleet.runner import EventCollector, HostOutcome
from provisioner.fleet.shared.inventory import Host
from provisioner.fleet.shared.report import BoardRow, FleetReport, row_for

#: The most of one board's pull report that is read. A board's deploy-and-verify run writes tens of KiB of
#: events (the events callback cuts each message at 4000 characters); a file past this is damaged or hostile,
#: and is reported as such instead of loaded (parsed JSON takes several times its text's size in memory).
MAX_PULL_REPORT_BYTES = 4 * 1024 * 1024

#: A board's report is ``<board>.jsonl`` and <board> an inventory host name (letters, digits, ``. _ - :``).
#: Any other file name cannot be a board the pull role set up, and would carry its bytes to terminals and CSV.
_BOARD_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._:-]{0,252}")

#: What one bad line may raise while it is parsed, folded or shown: json.loads (ValueError, and RecursionError
#: for deep nesting), and row_for/cells on values of the wrong JSON type.
_BAD_VALUE = (ValueError, TypeError, AttributeError, KeyError, RecursionError)

#: Entries of a pull directory that are no report at all (the collector writes regular files): skipped, no row.
_SYMLINK, _NOT_REGULAR = "a symlink, not followed", "not a regular file"


@dataclass
class PullFile:
    """What one uploaded ``<board>.jsonl`` says about its board, once what it may not say is dropped."""

    board: str
    outcome: HostOutcome | None = None
    head: dict[str, Any] | None = None     # the ``pull`` line: url, branch, commit, rc
    malformed: int = 0                     # lines that are not an event the report can use
    foreign: int = 0                       # lines about another board
    unread: str = ""                       # why the file was not read at all

    def ignored(self) -> str:
        """The lines dropped, in words ("" when none were)."""
        parts = [f"{self.malformed} malformed line(s)" if self.malformed else "",
                 f"{self.foreign} line(s) about other boards" if self.foreign else ""]
        return ", ".join(p for p in parts if p)


def _read_regular(entry: os.DirEntry[str], limit: int) -> tuple[bytes | None, str]:
    """The bytes of a regular file of at most ``limit`` bytes, or None and why it was not read.

    The collector stores each upload as a regular file; anything else in the directory is not a report.
    A symlink is not followed (to /dev/zero it would never end, to another file it would speak for another
    board), and the open uses O_NOFOLLOW | O_NONBLOCK so that neither a symlink swapped in after the listing
    is followed nor a FIFO blocks the open waiting for a writer (open(2); Python docs, ``os.open``). fstat on
    the open descriptor then checks what was really opened.
    """
    if entry.is_symlink():
        return None, _SYMLINK
    if not entry.is_file(follow_symlinks=False):
        return None, _NOT_REGULAR
    try:
        fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        return None, f"cannot open ({exc.strerror})"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None, _NOT_REGULAR
        if st.st_size > limit:
            return None, f"too large ({st.st_size} bytes; at most {limit} are read)"
        chunks, left = [], limit + 1          # +1: a file that grew past the limit since fstat is seen too
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        return None, f"cannot read ({exc.strerror})"
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:
        return None, f"too large (more than {limit} bytes)"
    return data, ""


def _shows(board: str, event: dict[str, Any]) -> bool:
    """Whether a host event can be folded into a row and shown: tried alone, nothing raises.

    Board payloads are JSON of any shape. Rather than a second schema that would drift from
    :func:`row_for`, each line is folded alone and its row rendered; a line that would break the
    report is dropped and counted instead.
    """
    trial = EventCollector()
    try:
        trial.feed(event)
        row_for(board, None, trial.hosts[board]).cells()
    except _BAD_VALUE:
        return False
    return True


def parse_pull(board: str, data: bytes) -> PullFile:
    """The events of ``board``'s report that are about ``board`` and usable; the others counted, not used.

    The board is the one the file was uploaded as. A ``host`` inside a line is what the board claims:
    a line claiming another board (a ``pull`` or ``host`` line, or ``stats`` naming another host) is
    ignored, so one board's upload can never change another board's row.
    """
    rep = PullFile(board)
    collector = EventCollector()
    for raw in io.BytesIO(data):                      # line by line: no list of every line of the file
        if not raw.strip():
            continue
        try:
            event = json.loads(raw.decode("utf-8"))
        except _BAD_VALUE:
            rep.malformed += 1
            continue
        kind = event.get("event") if isinstance(event, dict) else None
        if kind in ("pull", "host") and event.get("host") != board:
            if isinstance(event.get("host"), str):
                rep.foreign += 1
            else:
                rep.malformed += 1
        elif kind == "pull":
            rep.head = event
        elif kind == "host":
            if _shows(board, event):
                collector.feed(event)
            else:
                rep.malformed += 1
        elif kind == "stats":
            hosts = event.get("hosts")
            if not isinstance(hosts, dict) or not all(isinstance(v, dict) for v in hosts.values()):
                rep.malformed += 1
            elif set(hosts) - {board}:
                rep.foreign += 1
            else:
                collector.feed(event)
        elif not isinstance(kind, str):
            rep.malformed += 1
        # other events (play, task, ...) carry no result: nothing to fold
    rep.outcome = collector.hosts.get(board)
    return rep


def _pull_row(name: str, host: Host | None, rep: PullFile | None) -> BoardRow:
    """The row of one board from its report. A report with lines that had to be dropped does not pass:
    edge-llm-pull.py writes none, so such a report is damaged or forged and no evidence of a pass."""
    if rep is None:
        row = row_for(name, host, None)
        row.reason = "no pull report from this board yet"
        return row
    if rep.unread:
        row = row_for(name, host, None)
        row.verdict, row.reason = "fail", f"pull report not read: {rep.unread}"
        return row
    try:
        row = row_for(name, host, rep.outcome)
        row.cells()
    except _BAD_VALUE as exc:       # each line was tried alone; this is what only their mix breaks
        row = row_for(name, host, None)
        row.verdict, row.reason = "fail", f"pull report unusable ({type(exc).__name__})"
    if rep.outcome is None and row.verdict == "not-run":
        row.reason = "the pull report has no result for this board"
    head = rep.head or {}
    row.details["pull"] = {**{k: head.get(k) for k in ("url", "branch", "commit", "rc", "t")},
                           "malformed_lines": rep.malformed, "foreign_lines": rep.foreign}
    ignored = rep.ignored()
    if ignored:
        note = f"pull report: {ignored} ignored"
        if row.verdict in ("pass", "not-run"):
            row.verdict, row.reason = "fail", note
        else:
            row.reason = f"{row.reason}; {note}"
    return row


def from_pull(directory: Path, hosts: list[Host] | None = None,
              max_bytes: int = MAX_PULL_REPORT_BYTES) -> FleetReport:
    """The fleet report of boards in ansible-pull mode, from the reports they uploaded (``<board>.jsonl``).

    Each file holds the JSON lines of the ``edge_llm.fleet.events`` callback, as a push run streams
    them to the runner (role edge_llm_pull writes them on the board), after one ``pull`` line with the
    commit the board ran. The rows are built by the same :func:`row_for` as a push run's.

    What is trusted: the board is the name the file was uploaded under (the collector stores each
    board's PUT as ``<board>.jsonl``), never a host named inside it (see :func:`parse_pull`). Only
    regular files of at most ``max_bytes`` are read; other entries, bad lines and foreign lines are
    skipped and named in ``notes``, never fatal.

    With ``hosts`` (``-i``) the rows are exactly those hosts, in inventory order, and a host without
    a report is not-run. A report from a board the inventory does not list is named in a note and is
    no row: the operator asked about that fleet, and a board outside it is news to look into (a stale
    inventory, or something uploading that should not), not a result of it. A row would either count
    it as passing, or let anything that can upload fail a fleet it is not part of.
    """
    from provisioner.errors import FleetError

    directory = Path(directory)
    if not directory.is_dir():
        raise FleetError(f"{directory}: no such directory", "pass --from-pull with the directory the boards upload to")
    try:
        with os.scandir(directory) as it:
            entries = sorted((e for e in it if e.name.endswith(".jsonl")), key=lambda e: e.name)
    except OSError as exc:
        raise FleetError(f"{directory}: cannot list ({exc.strerror})",
                         "check the collector directory's permissions") from None
    if not entries:
        raise FleetError(f"{directory}: no pull reports (*.jsonl)",
                         "boards write <board>.jsonl after each ansible-pull run (role edge_llm_pull)")
    wanted = {h.name: h for h in hosts} if hosts is not None else None
    files: dict[str, PullFile] = {}
    notes: list[str] = []
    for entry in entries:
        board = entry.name[: -len(".jsonl")]
        if not _BOARD_NAME.fullmatch(board):
            notes.append(f"{entry.name!r}: not a board name, skipped")
            continue
        if wanted is not None and board not in wanted:
            notes.append(f"{entry.name}: {board} is not in the inventory (or outside --limit), not counted")
            continue
        data, why = _read_regular(entry, max_bytes)
        if data is None:
            notes.append(f"{entry.name}: {why}, skipped")
            if why not in (_SYMLINK, _NOT_REGULAR):     # a board's upload that cannot be used: its row fails
                files[board] = PullFile(board, unread=why)
            continue
        files[board] = rep = parse_pull(board, data)
        if rep.ignored():
            notes.append(f"{entry.name}: {rep.ignored()} ignored")
    names = list(wanted) if wanted is not None else list(files)
    rows = [_pull_row(n, wanted.get(n) if wanted else None, files.get(n)) for n in names]
    if wanted is None and not rows:
        raise FleetError(f"{directory}: no readable pull reports ({notes[0]})",
                         "boards upload regular files named <board>.jsonl")
    return FleetReport(action="pull", inventory=str(directory), duration_s=0.0, rows=rows,
                       returncode=int(any(r.verdict != "pass" for r in rows)), notes=notes)
