"""One read of the flash history for every front end (``station history``, the dashboard).

Why one function: whether the history comes from this station's SQLite file or from the central
PostgreSQL database that several stations forward to is a station.yaml setting, and a caller
should not have to know which. Rows look the same either way (the local ``attempts`` columns,
JSON decoded, ``duration_s``), plus ``station`` naming the station that recorded the attempt.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from provisioner.errors import StationError
from provisioner.station.central import Central
from provisioner.station.config import StationConfig
from provisioner.station.records import Records

OUTCOMES = ("passed", "failed", "interrupted", "running")


@dataclass
class History:
    """Attempts, newest first, and where they were read (``central`` or ``local``)."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    source: str = "local"
    where: str = ""
    truncated: bool = False


def read_history(cfg: StationConfig, *, serial: str | None = None, release: str | None = None,
                 outcome: str | None = None, station: str | None = None, limit: int | None = None,
                 local: bool = False, env: Mapping[str, str] | None = None) -> History:
    """The attempts matching every filter given; the central history when station.yaml names one
    (unless ``local``), else this station's database. An unreachable central database is the
    one-line StationError of :class:`Central` (its hint names ``--local``-style fallbacks)."""
    if outcome and outcome not in OUTCOMES:
        raise StationError(f"unknown outcome {outcome!r}", f"one of {', '.join(OUTCOMES)}")
    want = limit + 1 if limit else None
    if cfg.central is not None and not local:
        c = Central(cfg.central, env)
        try:
            rows = c.history(serial=serial, release=release, outcome=outcome, station=station, limit=want)
        finally:
            c.close()
        hist = History(rows, "central", cfg.central.describe())
    else:
        if not cfg.database.is_file():
            raise StationError(f"no station database at {cfg.database}", "flash a board first or pass --db")
        name = cfg.central.station if cfg.central is not None else None
        with Records(cfg.database, writer=False) as records:
            rows = [r | {"station": name} for r in records.history(serial)
                    if (not release or r.get("release_id") == release) and (not outcome or r["result"] == outcome)]
        if station and station != name:
            rows = []
        hist = History(rows[:want] if want else rows, "local", str(cfg.database))
    if limit and len(hist.rows) > limit:
        hist.rows, hist.truncated = hist.rows[:limit], True
    return hist
