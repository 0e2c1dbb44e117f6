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

from provisioner.fleet.inventory import Host, atomic_write
from provisioner.fleet.runner import FleetRun, HostOutcome

COLUMNS = ("board", "type", "release", "QAIRT", "decode tok/s", "expected", "TTFT s", "API TTFT s / tok/s",
           "endpoint", "verdict", "reason")


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
        dec = f"{self.decode_tok_s:.1f}" if self.decode_tok_s is not None else "-"
        exp = f">= {self.expected_decode_tok_s:g}" if self.expected_decode_tok_s is not None else "-"
        ttft = f"{self.ttft_s:.3f}" if self.ttft_s is not None else "-"
        return [self.board, self.type or "?", self.release or "-", ",".join(self.qairt) or "-", dec, exp, ttft,
                self.api_cell(), " ".join(self.endpoints.values()) or "-", self.verdict, self.reason]

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
                "boards": [asdict(r) for r in self.rows]}

    def to_csv(self) -> str:
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(["board", "type", "address", "release", "qairt", "decode_tok_s", "expected_decode_tok_s",
                    "ttft_s", "api_ttft_s", "api_decode_tok_s", "endpoints", "verdict", "reason", "changed",
                    "bytes_downloaded"])
        for r in self.rows:
            w.writerow([r.board, r.type or "", r.address or "", r.release or "", " ".join(r.qairt),
                        "" if r.decode_tok_s is None else r.decode_tok_s,
                        "" if r.expected_decode_tok_s is None else r.expected_decode_tok_s,
                        "" if r.ttft_s is None else r.ttft_s, *("" if v is None else v for v in r.api_figures()),
                        " ".join(r.endpoints.values()), r.verdict, r.reason, r.changed, r.bytes_downloaded])
        return buf.getvalue()

    def write(self, path: Path) -> Path:
        """JSON, or CSV when the name ends in .csv (written atomically)."""
        path = Path(path)
        text = self.to_csv() if path.suffix.lower() == ".csv" else json.dumps(self.as_dict(), indent=2,
                                                                              sort_keys=True, default=str) + "\n"
        atomic_write(path, text)
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
    deploys = [p for p in outcome.payloads if p.get("kind") in ("deploy", "rollback", "launch")]
    if deploys:
        row.details["steps"] = deploys
    if outcome.status == "unreachable":
        row.verdict = "unreachable"
        row.reason = _short(outcome.msg)
    elif outcome.status == "failed":
        row.verdict = "fail"
        if verify and not verify.get("ok") and (outcome.failed_action or "").endswith("verify"):
            row.reason = verify.get("reason") or _short(outcome.msg)
        elif ota and (ota.get("reason") or ota.get("outcome") == "rolled back"):
            # update-os: did not come back (its reason), or rolled back (the failing task says why)
            row.reason = _short(str(ota.get("reason") or outcome.msg))
        else:
            row.reason = f"{outcome.failed_task}: {_short(outcome.msg)}"
    else:
        row.verdict = "pass"
        row.reason = ""
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


def from_pull(directory: Path, hosts: list[Host] | None = None) -> FleetReport:
    """The fleet report of boards in ansible-pull mode, from the reports they uploaded (``<board>.jsonl``).

    Each file holds the JSON lines of the ``edge_llm.fleet.events`` callback, as a push run streams
    them to the runner (role edge_llm_pull writes them on the board), after one ``pull`` line with the
    commit the board ran. The rows are built by the same :func:`row_for` as a push run's; inventory
    hosts without a report are listed as not-run.
    """
    from provisioner.errors import FleetError
    from provisioner.fleet.runner import EventCollector

    directory = Path(directory)
    if not directory.is_dir():
        raise FleetError(f"{directory}: no such directory", "pass --from-pull with the directory the boards upload to")
    files = sorted(directory.glob("*.jsonl"))
    if not files:
        raise FleetError(f"{directory}: no pull reports (*.jsonl)",
                         "boards write <board>.jsonl after each ansible-pull run (role edge_llm_pull)")
    outcomes: dict[str, HostOutcome] = {}
    pulls: dict[str, dict[str, Any]] = {}
    failed = False
    for path in files:
        heads: list[dict[str, Any]] = []
        collector = EventCollector(lambda ev, heads=heads: heads.append(ev) if ev.get("event") == "pull" else None)
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise FleetError(f"{path}: cannot read ({exc})", "check the collector directory's permissions") from None
        for line in text.splitlines():
            collector.line(line)
        for name, outcome in collector.hosts.items():
            outcomes[name] = outcome
            failed = failed or outcome.status != "ok"
        for head in heads:
            pulls[str(head.get("host"))] = head
    names = {h.name for h in hosts or []}
    report = build_report(FleetRun(action="pull", inventory=str(directory), argv=[], returncode=int(failed),
                                   duration_s=0.0, hosts=outcomes, stats={}, log_path=None), hosts)
    for row in report.rows:
        if row.board in pulls:
            head = pulls[row.board]
            row.details["pull"] = {k: head.get(k) for k in ("url", "branch", "commit", "rc", "t")}
        elif row.verdict == "not-run" and row.board in names:
            row.reason = "no pull report from this board yet"
    return report
