"""Fleet report: one row per board (type, release, QAIRT, decode vs expected, verdict, reason) + JSON/CSV.

Built from a :class:`~provisioner.fleet.runner.FleetRun` and the inventory's host list, so boards
that never answered (unreachable, or not reached because the run stopped) are still listed.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import stat
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from provisioner.errors import FleetError
from provisioner.fleet import hostkey
from provisioner.fleet.inventory import Host, atomic_write
from provisioner.fleet.runner import EventCollector, FleetRun, HostOutcome

COLUMNS = ("board", "type", "release", "QAIRT", "decode tok/s", "expected", "TTFT s", "API TTFT s / tok/s",
           "endpoint", "verdict", "reason")

#: C0 and C1 control characters and DEL (ESC starts ANSI escape sequences, OSC 8 hyperlinks among them; BEL, BS
#: and CR rewrite what was shown), and the Unicode bidirectional controls that reorder text on screen
#: ("Trojan Source", CVE-2021-42574).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")

#: A CSV cell starting with one of these is a formula to spreadsheet programs (OWASP "CSV Injection";
#: NUL from OWASP ASVS 5.0, V1.2.10).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\0")


def visible_text(value: object, limit: int = 400) -> str:
    """``value`` with control characters shown as Python escapes (``\\x1b``) and cut at ``limit``: what a
    table cell shows of board text (:func:`provisioner.ui.table` renders cells as plain text, never markup)."""
    text = _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(value))
    return text[: limit - 3] + "..." if len(text) > limit else text


def terminal_text(value: object, limit: int = 400) -> str:
    """:func:`visible_text` with rich markup escaped (``rich.markup.escape``), for board text inside a line
    rich prints with markup (a title, a note), so ``[link=...]`` shows as typed."""
    from rich.markup import escape

    return escape(visible_text(value, limit))


def csv_cell(value: Any) -> Any:
    """A CSV cell that a spreadsheet will not run: text starting like a formula gets a leading single
    quote (OWASP "CSV Injection"); numbers stay numbers."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


@dataclass
class BoardRow:
    board: str
    type: str | None
    address: str | None
    verdict: str                          # pass | fail | unreachable | not-run
    reason: str = ""
    release: str | None = None
    qairt: list[str] = field(default_factory=list)
    decode_tok_s: float | None = None
    expected_decode_tok_s: float | None = None
    ttft_s: float | None = None
    changed: int = 0
    bytes_downloaded: int = 0
    checks: list[dict[str, Any]] = field(default_factory=list)
    models: dict[str, Any] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    endpoints: dict[str, str] = field(default_factory=dict)   # model -> base URL of its OpenAI API (launch)
    api: dict[str, Any] = field(default_factory=dict)         # model -> streamed TTFT/decode medians (benchmark)

    def cells(self) -> list[str]:
        """The row as terminal table cells: board text made visible by :func:`visible_text`."""
        dec = f"{self.decode_tok_s:.1f}" if self.decode_tok_s is not None else "-"
        exp = f">= {self.expected_decode_tok_s:g}" if self.expected_decode_tok_s is not None else "-"
        ttft = f"{self.ttft_s:.3f}" if self.ttft_s is not None else "-"
        cells = [self.board, self.type or "?", self.release or "-", ",".join(self.qairt) or "-", dec, exp, ttft,
                 self.api_cell(), " ".join(self.endpoints.values()) or "-", self.verdict, self.reason]
        return [visible_text(c) for c in cells]

    def api_figures(self) -> tuple[float | None, float | None]:
        """The slowest model's streamed TTFT and decode tok/s through the API, as a client sees them."""
        ttfts = [a["median_ttft_s"] for a in self.api.values() if a.get("median_ttft_s") is not None]
        decs = [a["median_decode_tok_s"] for a in self.api.values() if a.get("median_decode_tok_s") is not None]
        return (max(ttfts) if ttfts else None, min(decs) if decs else None)

    def api_cell(self) -> str:
        ttft, dec = self.api_figures()
        if ttft is None and dec is None:
            return "-"
        return (f"{ttft:.3f}" if ttft is not None else "-") + " / " + (f"{dec:.1f}" if dec is not None else "-")


@dataclass
class FleetReport:
    action: str
    inventory: str
    duration_s: float
    rows: list[BoardRow]
    returncode: int
    log_path: str | None = None
    notes: list[str] = field(default_factory=list)     # inputs skipped or partly ignored (pull reports)

    @property
    def ok(self) -> bool:
        return all(r.verdict == "pass" for r in self.rows) and bool(self.rows)

    def row(self, board: str) -> BoardRow:
        for r in self.rows:
            if r.board == board:
                return r
        raise KeyError(board)

    @property
    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.rows:
            out[r.verdict] = out.get(r.verdict, 0) + 1
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"action": self.action, "inventory": self.inventory, "duration_s": self.duration_s,
                "ok": self.ok, "counts": self.counts, "returncode": self.returncode, "log": self.log_path,
                "notes": self.notes, "boards": [asdict(r) for r in self.rows]}

    def to_csv(self) -> str:
        """The rows as CSV; every cell through :func:`csv_cell`, as board text reaches spreadsheets."""
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(["board", "type", "address", "release", "qairt", "decode_tok_s", "expected_decode_tok_s",
                    "ttft_s", "api_ttft_s", "api_decode_tok_s", "endpoints", "verdict", "reason", "changed",
                    "bytes_downloaded"])
        for r in self.rows:
            cells = [r.board, r.type or "", r.address or "", r.release or "", " ".join(r.qairt),
                     "" if r.decode_tok_s is None else r.decode_tok_s,
                     "" if r.expected_decode_tok_s is None else r.expected_decode_tok_s,
                     "" if r.ttft_s is None else r.ttft_s, *("" if v is None else v for v in r.api_figures()),
                     " ".join(r.endpoints.values()), r.verdict, r.reason, r.changed, r.bytes_downloaded]
            w.writerow([csv_cell(c) for c in cells])
        return buf.getvalue()

    def write(self, path: Path) -> Path:
        """JSON, or CSV when the name ends in .csv (written atomically)."""
        path = Path(path)
        text = self.to_csv() if path.suffix.lower() == ".csv" else json.dumps(self.as_dict(), indent=2,
                                                                              sort_keys=True, default=str) + "\n"
        try:
            atomic_write(path, text)
        except OSError as exc:                 # full disk, a folder removed meanwhile
            raise FleetError(f"cannot write the report {path}: {exc.strerror or exc}",
                             "free space or name another file with --report; the boards' state is unchanged "
                             "by this") from None
        return path


def _first_model(payload: dict[str, Any]) -> tuple[float | None, float | None, float | None]:
    models = payload.get("models") or {}
    decs, exps, ttfts = [], [], []
    for fig in models.values():
        if fig.get("decode_tok_s") is not None:
            decs.append(float(fig["decode_tok_s"]))
        if fig.get("min_decode_tok_s") is not None:
            exps.append(float(fig["min_decode_tok_s"]))
        if fig.get("ttft_s") is not None:
            ttfts.append(float(fig["ttft_s"]))
    return (min(decs) if decs else None, min(exps) if exps else None, max(ttfts) if ttfts else None)


def update_os_payload(outcome: HostOutcome) -> dict[str, Any] | None:
    """update-os payloads merged in order: each step adds what it knows (stage: from, to and the pull
    summary; commit or rollback: the outcome), a later non-empty value wins."""
    merged: dict[str, Any] = {}
    for p in outcome.payloads:
        if p.get("kind") == "update-os":
            merged.update({k: v for k, v in p.items() if v not in (None, "")})
    return merged or None


def row_for(name: str, host: Host | None, outcome: HostOutcome | None) -> BoardRow:
    hv = host.vars if host else {}
    row = BoardRow(board=name, type=hv.get("edge_llm_board"), address=host.address if host else None,
                   verdict="not-run")
    if outcome is None:
        row.reason = "not reached (no task ran on this board)"
        return row
    row.changed = outcome.changed
    row.bytes_downloaded = outcome.bytes_downloaded
    verify = outcome.payload("verify")
    bench = outcome.payload("benchmark")
    if verify:
        row.release = verify.get("release")
        row.qairt = list(verify.get("qairt") or [])
        row.checks = list(verify.get("checks") or [])
        row.models = dict(verify.get("models") or {})
        row.decode_tok_s, row.expected_decode_tok_s, row.ttft_s = _first_model(verify)
        row.type = row.type or verify.get("board")
    if bench:
        row.details["benchmark"] = bench.get("benchmark")
        meds = [b.get("median_decode_tok_s") for b in (bench.get("benchmark") or {}).values()
                if b.get("median_decode_tok_s") is not None]
        ttfts = [b.get("median_ttft_s") for b in (bench.get("benchmark") or {}).values()
                 if b.get("median_ttft_s") is not None]
        if meds:
            row.decode_tok_s = min(meds)
        if ttfts:
            row.ttft_s = max(ttfts)
    launch = outcome.payload("launch")
    if launch:
        row.endpoints = {str(m): str(u) for m, u in (launch.get("endpoints") or {}).items()}
    # the API figures: edge_llm.fleet.benchmark's payload carries them (api), edge_llm.fleet.api's its own kind
    api = outcome.payload("api_benchmark") or (bench if bench and bench.get("api") else None)
    if api:
        row.api = dict(api.get("api") or {})
        row.endpoints = row.endpoints or {m: str(a["endpoint"]) for m, a in row.api.items() if a.get("endpoint")}
    ota = update_os_payload(outcome)
    if ota:
        row.details["update_os"] = {k: ota.get(k) for k in ("outcome", "from", "to")}
        if verify and verify.get("api_step"):          # the update-os gate: did it also go through the API
            row.details["update_os"]["api"] = verify["api_step"]
        row.bytes_downloaded += ostree_pulled_bytes(str(ota.get("pull") or ""))
    if verify and verify.get("api") and not row.api:
        row.api = dict(verify["api"])
    evaluated = outcome.payload("eval")
    if evaluated:
        row.details["eval"] = {m: {"score": r.get("score"), "worst": r.get("worst")}
                               for m, r in (evaluated.get("models") or {}).items()}
    deploys = [p for p in outcome.payloads if p.get("kind") in ("deploy", "rollback", "launch")]
    if deploys:
        row.details["steps"] = deploys
    key_mismatch = hostkey.mismatch_reason(outcome.msg, hv.get("edge_llm_host_keys")) \
        if outcome.status == "unreachable" else None
    if key_mismatch:
        row.verdict = "fail"          # ssh reached a board and refused it: that is a verdict, not an outage
        row.reason = key_mismatch
    elif outcome.status == "unreachable":
        row.verdict = "unreachable"
        row.reason = _short(outcome.msg)
    elif outcome.status == "failed":
        row.verdict = "fail"
        if verify and not verify.get("ok") and (outcome.failed_action or "").endswith("verify"):
            row.reason = verify.get("reason") or _short(outcome.msg)
        elif ota and (ota.get("reason") or ota.get("outcome") == "rolled back"):
            # update-os: did not come back (its reason), or rolled back (the failing task says why)
            row.reason = _short(str(ota.get("reason") or outcome.msg))
        elif evaluated and evaluated.get("failures"):
            # fleet eval or an eval gate: the score, the rollback and the worst failure, not cut by the task's name
            row.reason = _short(outcome.msg, 480)
        else:
            row.reason = f"{outcome.failed_task}: {_short(outcome.msg)}"
    else:
        row.verdict = "pass"
        # launch on an OSTree board keeps the image's service where it differs: say so on the passing row
        kept = (launch or {}).get("kept_image") or []
        row.reason = _short(f"kept the image's {', '.join(map(str, kept))} (OSTree /usr is read-only; a newer "
                            "service comes with fleet update-os)") if kept else ""
    return row


#: the summary line ``ostree pull`` prints at the end, e.g. "1 delta parts, 3 loose fetched; 1 KiB transferred
#: in 0 seconds; 0 bytes content written" (as ostree 2022.7 prints it; units are IEC or SI).
_OSTREE_XFER = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*(bytes|[kKMG]i?B)\s+transferred")
_UNITS = {"bytes": 1, "kB": 1000, "KB": 1000, "KiB": 1024, "MB": 1000**2, "MiB": 1024**2, "GB": 1000**3,
          "GiB": 1024**3}


def ostree_pulled_bytes(pull_output: str) -> int:
    """Bytes an ``ostree pull`` reports it transferred (0 when it fetched nothing or did not say)."""
    m = _OSTREE_XFER.search(pull_output.replace("\u00a0", " "))
    return int(float(m.group(1)) * _UNITS.get(m.group(2), 1)) if m else 0


def _short(msg: str, n: int = 240) -> str:
    one = " ".join(str(msg).split())
    return one if len(one) <= n else one[: n - 3] + "..."


def build_report(run: FleetRun, hosts: list[Host] | None = None) -> FleetReport:
    """Rows for every inventory host (in inventory order), then any host only the run knew about."""
    rows = []
    seen = set()
    for h in hosts or []:
        rows.append(row_for(h.name, h, run.hosts.get(h.name)))
        seen.add(h.name)
    for name, outcome in run.hosts.items():
        if name not in seen:
            rows.append(row_for(name, None, outcome))
    return FleetReport(action=run.action, inventory=run.inventory, duration_s=run.duration_s, rows=rows,
                       returncode=run.returncode, log_path=run.log_path)


def median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None




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
