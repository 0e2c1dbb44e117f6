"""Fleet report: one row per board (type, release, QAIRT, decode vs expected, verdict, reason) + JSON/CSV.

Built from a :class:`~provisioner.fleet.runner.FleetRun` and the inventory's host list, so boards
that never answered (unreachable, or not reached because the run stopped) are still listed.
"""

from __future__ import annotations

import csv
import io
import json
import re
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from provisioner.errors import FleetError
from provisioner.fleet.runner import FleetRun, HostOutcome
from provisioner.fleet.shared import hostkey
from provisioner.fleet.shared.inventory import Host, atomic_write

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
