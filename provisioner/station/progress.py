"""Live per-board progress for a flash run (rich Live on a terminal, plain lines otherwise).

It is only a :class:`StepEvent` listener: the strategy does not know it exists, and the same
events go to the station records.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from provisioner.steps import StepEvent


@dataclass
class _Row:
    serial: str
    slot: str | None = None
    state: str = "unknown"
    partition: str | None = None
    done: int = 0
    total: int = 0
    rate_kbs: float | None = None
    attempt: int = 1
    error: str | None = None
    started: float = 0.0


class LiveProgress:
    """One line per slot: state, partition being written, kB/s, retries, error."""

    def __init__(self, console: Console, serials: list[str] | None = None) -> None:
        self.console = console
        self.rows: dict[str, _Row] = {s.upper(): _Row(s.upper()) for s in serials or []}
        self._lock = threading.Lock()
        self.live: Live | None = None
        self.plain = not console.is_terminal

    def __enter__(self) -> LiveProgress:
        if not self.plain:
            self.live = Live(self._render(), console=self.console, refresh_per_second=8, transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.live is not None:
            self.live.update(self._render())
            self.live.__exit__(*exc)

    def __call__(self, ev: StepEvent) -> None:
        with self._lock:
            row = self.rows.setdefault(ev.serial, _Row(ev.serial))
            row.slot = ev.slot or row.slot
            d = ev.detail
            if ev.kind == "state":
                row.state = d["state"]
                if row.state == "flashing" and not row.started:
                    row.started = time.monotonic()
                if row.state == "flashed":
                    row.partition = None
            elif ev.kind == "progress" and ev.step == "flash":
                row.partition = d.get("partition") or d.get("phase")
                row.done = d.get("done", row.done)
                row.total = d.get("total", row.total)
                row.rate_kbs = d.get("rate_kbs") or row.rate_kbs
                row.attempt = d.get("attempt") or row.attempt
            elif ev.kind == "retry":
                row.attempt = d.get("attempt", 1) + 1
                row.error = f"retrying: {d.get('error')}"
            elif ev.kind == "error":
                row.error = d.get("error")
            if self.plain and ev.kind in ("state", "retry", "error"):
                what = row.state if ev.kind == "state" else f"{ev.step} {ev.kind}: {d.get('error', '')}"
                self.console.print(f"[{row.slot or '-'}] {ev.serial}: {what}", markup=False, highlight=False)
            if self.live is not None:
                self.live.update(self._render())

    def _render(self) -> Table:
        t = Table(title="flashing", title_justify="left")
        for col in ("slot", "serial", "state", "partition", "progress", "kB/s", "try", "note"):
            t.add_column(col)
        for r in sorted(self.rows.values(), key=lambda r: (r.slot or "", r.serial)):
            style = {"failed": "red", "flashed": "green", "verified": "green", "booted": "cyan"}.get(r.state, "")
            t.add_row(r.slot or "", r.serial, f"[{style}]{r.state}[/]" if style else r.state,
                      r.partition or "", f"{r.done}/{r.total}" if r.total else "",
                      f"{r.rate_kbs:.0f}" if r.rate_kbs else "", str(r.attempt), (r.error or "")[:60])
        return t
