"""What the station dashboard shows for each slot: one tile, from events, records and the USB scan.

Pure state, no I/O, so the rules are tested without a browser. Three inputs feed it:

* live board events from the flashing station (:mod:`provisioner.station.feed`): states, step
  starts, qdl progress, and each attempt's start and outcome - the fast path;
* the recorded attempts (:mod:`provisioner.station.history_reader`): what a dashboard started
  mid-run, or one that missed a datagram, learns within a poll; an outcome recorded there wins;
* the EDL scan of sysfs: which slots hold a board waiting in EDL, and which are empty.

A tile keeps a board's outcome until another board appears in its slot, so an operator sees
which board to pull. Phases only move forward within one attempt (a late poll never takes a
tile from ``booting`` back to ``flashing``).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

#: a tile's phases in the order an attempt goes through them, and what the page prints for each
PHASES = {"empty": "empty", "edl": "in EDL", "flashing": "flashing", "flashed": "flashed", "booting": "booting",
          "boot-check": "boot check", "passed": "passed", "failed": "failed", "interrupted": "interrupted"}
FINAL = ("passed", "failed", "interrupted")
_RANK = {p: i for i, p in enumerate(PHASES)}
#: the strategy's board states (provisioner.station.strategy.STATES) as tile phases
_STATE_PHASE = {"unknown": "edl", "edl": "edl", "flashing": "flashing", "flashed": "flashed",
                "booted": "boot-check", "verified": "boot-check", "failed": "failed"}
#: a step that starts moves the tile on
_STEP_PHASE = {"flash": "flashing", "boot": "booting", "verify": "boot-check"}
REASON_MAX = 200


def reason(text: Any) -> str | None:
    """A failure as a tile says it: the first line, without the hint a UserError appends after
    `` -> `` (provisioner/errors.py, ``UserError.__str__``): the history keeps the whole message."""
    line = one_line(text, 10 * REASON_MAX)
    return one_line(line.split(" -> ", 1)[0]) if line else line


def one_line(text: Any, limit: int = REASON_MAX) -> str | None:
    """The first line of a message, bounded (board and qdl text is untrusted and may be long)."""
    if text is None:
        return None
    line = str(text).strip().splitlines()[0] if str(text).strip() else ""
    return line if len(line) <= limit else line[:limit - 1] + "\u2026"


@dataclass
class Tile:
    """One slot as the page shows it."""

    slot: str
    phase: str = "empty"
    serial: str | None = None
    release: str | None = None
    board: str | None = None
    attempt: int | None = None
    reason: str | None = None
    partition: str | None = None
    done: int = 0
    total: int = 0
    rate_kbs: float | None = None
    tries: int = 0
    in_edl: bool = False
    ts: float = 0.0          # when the board event behind the last change happened (epoch s)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"label": PHASES[self.phase]}

    def _new_attempt(self, attempt: int | None, serial: str | None, release: str | None, board: str | None) -> None:
        self.attempt, self.serial, self.release, self.board = attempt, serial, release, board or self.board
        self.reason, self.partition, self.done, self.total, self.rate_kbs, self.tries = None, None, 0, 0, None, 0

    def _advance(self, phase: str) -> bool:
        if self.phase in FINAL or _RANK[phase] <= _RANK[self.phase]:
            return False
        self.phase = phase
        return True


class SlotBoard:
    """Every slot's tile. Each ``apply_*`` returns the slots whose tile changed."""

    def __init__(self, slots: list[str] | None = None) -> None:
        self.tiles: dict[str, Tile] = {s: Tile(s) for s in slots or []}
        self._slot_of: dict[str, str] = {}      # serial -> slot of its current attempt
        self._pending: dict[str, dict[str, Any]] = {}   # serial -> attempt start, slot not known yet

    def _tile(self, slot: str | None, serial: str) -> Tile | None:
        key = slot or self._slot_of.get(serial)
        if not key:
            return None
        self._slot_of[serial] = key
        return self.tiles.setdefault(key, Tile(key))

    # -- live events -----------------------------------------------------------------
    def apply_event(self, msg: dict[str, Any]) -> list[str]:
        """One feed message (``StepEvent.as_dict()`` plus ``attempt``); malformed ones change nothing."""
        serial, slot, step, kind = msg.get("serial"), msg.get("slot"), msg.get("step"), msg.get("kind")
        detail = msg.get("detail") if isinstance(msg.get("detail"), dict) else {}
        if not isinstance(serial, str) or not isinstance(step, str) or not isinstance(kind, str):
            return []
        slot = slot if isinstance(slot, str) else None
        attempt = msg.get("attempt") if isinstance(msg.get("attempt"), int) else None
        tile = self._tile(slot, serial)
        if tile is None:
            # a board sent to EDL from its console: its slot is known once it is found in EDL
            if step == "attempt" and kind == "start":
                self._pending[serial] = detail
            return []
        if attempt is not None and tile.attempt is not None and attempt < tile.attempt:
            return []                            # an older attempt's late datagram
        before = tile.as_dict()
        if step == "attempt" and kind == "start" or (attempt is not None and attempt != tile.attempt):
            start = detail if step == "attempt" else self._pending.pop(serial, {})
            tile._new_attempt(attempt, serial, _text(start.get("release")), _text(start.get("board")))
            tile.phase = "edl"
        if step == "attempt" and kind == "stop":
            result = detail.get("result")
            if result in FINAL:
                tile.phase = result
                tile.reason = reason(detail.get("error"))
                tile.partition = None
        elif kind == "state":
            phase = _STATE_PHASE.get(detail.get("state"))
            if phase:
                tile._advance(phase)
        elif kind == "start" and step in _STEP_PHASE:
            tile._advance(_STEP_PHASE[step])
        elif kind == "error":
            tile.reason = reason(detail.get("error"))
        elif kind == "retry":
            tile.reason = reason(f"retrying after: {detail.get('error')}")
        elif kind == "progress" and step == "boot" and detail.get("check"):
            tile._advance("boot-check")
        elif kind == "progress" and step == "flash" and tile.phase not in FINAL:
            tile.partition = _text(detail.get("partition")) or _text(detail.get("phase")) or tile.partition
            tile.done = _int(detail.get("done"), tile.done)
            tile.total = _int(detail.get("total"), tile.total)
            rate = detail.get("rate_kbs")
            tile.rate_kbs = float(rate) if isinstance(rate, int | float) and rate > 0 else tile.rate_kbs
            tile.tries = _int(detail.get("attempt"), tile.tries)
        if tile.as_dict() == before:
            return []
        ts = msg.get("ts")
        tile.ts = float(ts) if isinstance(ts, int | float) else time.time()
        return [tile.slot]

    # -- recorded attempts -----------------------------------------------------------
    def apply_attempts(self, rows: list[dict[str, Any]], *, dead: set[int] | None = None) -> list[str]:
        """The newest recorded attempt per slot (:meth:`HistoryReader.latest_by_slot`).

        ``dead``: ids of running attempts whose station process is gone (shown as interrupted).
        """
        changed = []
        for r in rows:
            slot = r.get("slot")
            if not slot:
                continue
            tile = self.tiles.setdefault(slot, Tile(slot))
            before = tile.as_dict()
            if tile.attempt is None or r["id"] > tile.attempt:
                if tile.attempt is None and tile.serial and tile.serial != r["serial"] and tile.in_edl:
                    continue                     # a newer board waits in EDL: the old outcome is history
                tile._new_attempt(r["id"], r["serial"], r.get("release_id"), r.get("board"))
                tile.phase = "edl"
                tile.tries = r.get("tries") or 0
            elif r["id"] < tile.attempt:
                continue
            if r["result"] in FINAL:
                tile.phase, tile.reason, tile.partition = r["result"], reason(r.get("error")), None
            elif dead and r["id"] in dead:
                tile.phase, tile.reason = "interrupted", "the station process ended during this attempt"
            else:
                tile._advance(_STATE_PHASE.get(r.get("state"), "edl"))
                step = r.get("last_step")
                if step and step[1] == "start" and step[0] in _STEP_PHASE:
                    tile._advance(_STEP_PHASE[step[0]])
            if tile.as_dict() != before:
                tile.ts = time.time()
                changed.append(slot)
        return changed

    # -- the USB scan ----------------------------------------------------------------
    def apply_scan(self, in_edl: dict[str, str]) -> list[str]:
        """``in_edl``: slot -> serial of the board waiting in EDL there, for every such slot."""
        changed = []
        for slot in set(self.tiles) | set(in_edl):
            tile = self.tiles.setdefault(slot, Tile(slot))
            before = tile.as_dict()
            serial = in_edl.get(slot)
            tile.in_edl = serial is not None
            if serial and (tile.phase == "empty" or (tile.phase in FINAL and serial != tile.serial)):
                tile._new_attempt(None, serial, None, None)     # a new board, not flashed yet
                tile.phase = "edl"
            elif not serial and tile.phase == "edl" and tile.attempt is None:
                tile.phase, tile.serial = "empty", None         # it was pulled before anyone flashed it
            if tile.as_dict() != before:
                tile.ts = time.time()
                changed.append(slot)
        return changed

    def snapshot(self) -> list[dict[str, Any]]:
        return [self.tiles[k].as_dict() for k in sorted(self.tiles, key=_slot_order)]


def _slot_order(name: str) -> tuple[Any, ...]:
    """Natural order: "slot 2" before "slot 10"."""
    import re

    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", name) if p)


def _text(value: Any) -> str | None:
    return one_line(value, 120) if isinstance(value, str) and value else None


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else default
