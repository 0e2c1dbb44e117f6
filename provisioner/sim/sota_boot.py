"""SIMULATED boot side of a QLI sota board: systemd-boot's entry choice and boot counting, systemd-bless-boot,
and the two things the board's ostree has that the host's does not.

A real QLI sota board boots with systemd-boot (uptane/meta-updater @ f0e1ccaf classes/sota_qcom.bbclass:1
``OSTREE_BOOTLOADER ?= "systemd-boot"``) from Boot Loader Specification entries on the ESP, and its ostree
names those entries with boot-counting tries (sota_qcom.bbclass:27-29 ``sysroot.boot-counting-tries:3``).
The rules simulated here, each from its source:

- *entry names* (ostreedev/ostree v2026.1 src/libostree/ostree-sysroot-deploy.c:1795-1829): an entry is
  ``ostree-<N>`` where N counts down from the number of deployments (the default has the highest N); with
  ``sysroot.boot-counting-tries`` set (ostree-repo.c:3342-3350) a *new* deployment's entry gets ``+<tries>``,
  an existing one keeps the counters its file name had (``+<left>-<done>``, or none once blessed).
- *systemd-boot* (systemd docs "Automatic Boot Assessment", systemd-boot(7)): entries are ordered by version,
  newest first, and entries with 0 tries left ("bad") after all others; before booting an entry with counters
  it renames the file, one try left less and one done more; an entry that never reaches boot-complete is tried
  again at the next boot until its tries run out, then the next entry boots.
- *systemd-bless-boot* (systemd-bless-boot.service(8)): at boot-complete.target the booted entry's counters are
  removed from its file name ("good"). The board's edge-llm-boot-check runs before that target; the simulator
  blesses every entry that came up (the boot check passes on every virtual board that boots).
- *ostree admin set-default INDEX* (v2026.1 src/ostree/ot-admin-builtin-set-default.c:57-60: the deployment at
  INDEX moves to the front, the deployments are written again) does not exist in the host's ostree (Debian's
  2022.7). The simulator does it on the entries: ostree orders deployments by the entries' ``version``
  (v2022.7 src/libostree/ostree-sysroot.c:613-676), so the entries are renumbered in the new order, each
  keeping its counters. A real 2026.1 writes a new ``loader.N``; this edits the current one.

Where the host's ostree differs from the board's on the ESP: meta-updater's ostree patch 0001 ("Add support
for directories instead of symbolic links in boot partition", applied by recipes-extended/ostree/
ostree_2026.1.bbappend:9-15) lets ``loader`` be a directory on the vfat ESP, and image_types_ota.bbclass:124-129
makes it one, with an ``ostree_bootversion`` file. The host's ostree needs the ``loader -> loader.N`` link, so
the simulated ESP is a plain folder that keeps it; this module reads ``loader/entries`` either way.
Nothing here is shared with production code.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ENTRY_RE = re.compile(r"^(?P<stem>.+?)(?:\+(?P<left>\d+)(?:-(?P<done>\d+))?)?\.conf$")
DEFAULT_TRIES = 3                      # sota_qcom.bbclass:28-29


@dataclass
class Entry:
    path: Path
    stem: str
    left: int | None          # None: no counters (blessed, or boot counting off)
    done: int
    version: int
    options: str

    @property
    def bad(self) -> bool:
        return self.left == 0

    @property
    def ostree_arg(self) -> str:
        return next((o[len("ostree="):] for o in self.options.split() if o.startswith("ostree=")), "")


def entries_dir(esp: Path) -> Path:
    return esp / "loader" / "entries"


def read_entries(esp: Path) -> list[Entry]:
    """The entries on the ESP, as systemd-boot would load them (key, space, value per line)."""
    out = []
    d = entries_dir(esp)
    for f in sorted(d.glob("*.conf")) if d.is_dir() else []:
        m = ENTRY_RE.match(f.name)
        if not m:
            continue
        keys: dict[str, str] = {}
        for line in f.read_text(encoding="utf-8").splitlines():
            key, _, val = line.strip().partition(" ")
            if key and not key.startswith("#"):
                keys[key] = val.strip()
        try:
            version = int(keys.get("version", "0"))
        except ValueError:
            version = 0
        out.append(Entry(f, m["stem"], int(m["left"]) if m["left"] is not None else None,
                         int(m["done"] or 0), version, keys.get("options", "")))
    return out


def boot_order(entries: list[Entry]) -> list[Entry]:
    """systemd-boot's menu order: newest version first, bad entries (0 tries left) after all others."""
    return sorted(entries, key=lambda e: (e.bad, -e.version, [-ord(c) for c in e.path.name]))


def _name(stem: str, left: int | None, done: int) -> str:
    if left is None:
        return f"{stem}.conf"
    return f"{stem}+{left}.conf" if done == 0 else f"{stem}+{left}-{done}.conf"


def _rename(entry: Entry, left: int | None, done: int) -> Entry:
    new = entry.path.with_name(_name(entry.stem, left, done))
    if new != entry.path:
        os.replace(entry.path, new)
    return Entry(new, entry.stem, left, done, entry.version, entry.options)


def boot(esp: Path, comes_up: Callable[[Entry], bool], log: list[dict[str, object]]) -> Entry | None:
    """Power on: systemd-boot picks an entry, counts a try, and the kernel comes up or the watchdog resets the
    board and systemd-boot picks again. Returns the entry that came up (not yet blessed), None if none does."""
    tried_without_counters: set[str] = set()
    for _ in range(64):
        order = boot_order(read_entries(esp))
        if not order:
            return None
        entry = order[0]
        if entry.left is not None and entry.left > 0:
            entry = _rename(entry, entry.left - 1, entry.done + 1)       # counted before the kernel starts
        up = comes_up(entry)
        log.append({"entry": entry.path.name, "came_up": up})
        if up:
            return entry
        if entry.left is None or entry.bad:
            # no tries to run out (blessed) or already bad and still first: every boot ends the same way
            if entry.stem in tried_without_counters or all(e.bad or e.left is None for e in order):
                return None
            tried_without_counters.add(entry.stem)
    return None


def bless(entry: Entry) -> Entry:
    """systemd-bless-boot ``good``: the counters leave the file name."""
    return _rename(entry, None, 0)


def deployment_key(entry: Entry, root: Path) -> str:
    """The deployment an entry boots (its ``ostree=`` link resolved under ``root``), to follow it across the
    ``boot.N`` link directories ostree rewrites on every deploy."""
    arg = entry.ostree_arg
    return os.path.realpath(root / arg.lstrip("/")) if arg else ""


def counters(esp: Path, root: Path) -> dict[str, list[int] | None]:
    """Each deployment's counters as its entry's file name has them now (None: no counters)."""
    return {deployment_key(e, root): (None if e.left is None else [e.left, e.done]) for e in read_entries(esp)}


def tries_configured(repo: Path) -> int:
    """``sysroot.boot-counting-tries`` from the repo config (0 when unset), as ostree-repo.c:3342-3350 reads it."""
    section = ""
    try:
        lines = (repo / "config").read_text(encoding="utf-8").splitlines()
    except OSError:
        return 0
    for line in lines:
        line = line.strip()
        if line.startswith("["):
            section = line.strip("[]")
        elif section == "sysroot" and line.partition("=")[0].strip() == "boot-counting-tries":
            value = line.partition("=")[2].strip()
            return int(value) if value.isdigit() else 0
    return 0


def name_entries(esp: Path, root: Path, before: dict[str, list[int] | None], tries: int) -> None:
    """After the host's ostree wrote entries: give them the names ostree 2026.1 gives (see module doc)."""
    found = sorted(read_entries(esp), key=lambda e: -e.version)
    n = len(found)
    for pos, e in enumerate(found):
        key = deployment_key(e, root)
        if key in before:
            kept = before[key]
            left, done = (None, 0) if kept is None else (kept[0], kept[1])
        else:
            left, done = (tries, 0) if tries else (None, 0)
        new = e.path.with_name(_name(f"ostree-{n - pos}", left, done))
        if new != e.path:
            os.replace(e.path, new)


def set_default(esp: Path, index: int) -> None:
    """``ostree admin set-default INDEX`` on the entries: renumber them with INDEX first (see module doc)."""
    order = sorted(read_entries(esp), key=lambda e: -e.version)
    if not 0 <= index < len(order):
        raise IndexError(f"Out of range deployment index {index}, expected < {len(order)}")
    order.insert(0, order.pop(index))
    n = len(order)
    staged = []
    for pos, e in enumerate(order):
        text = e.path.read_text(encoding="utf-8")
        text = re.sub(r"(?m)^version .*$", f"version {n - pos}", text)
        tmp = e.path.with_name(f".{e.path.name}.tmp")
        tmp.write_text(text, encoding="utf-8")
        staged.append((e, tmp, _name(f"ostree-{n - pos}", e.left, e.done)))
    for entry, _tmp, _new in staged:
        entry.path.unlink()
    for e, tmp, name in staged:
        os.replace(tmp, e.path.with_name(name))


def main(argv: list[str]) -> int:
    """Called by the board's ``/usr/bin/ostree`` (see :func:`provisioner.sim.sota_root.ostree_wrapper`)."""
    if len(argv) == 3 and argv[0] == "snapshot":
        Path(argv[2]).write_text(json.dumps(counters(Path(argv[1]), Path("/"))), encoding="utf-8")
        return 0
    if len(argv) == 4 and argv[0] == "name":
        before = json.loads(Path(argv[2]).read_text(encoding="utf-8"))
        name_entries(Path(argv[1]), Path("/"), before, tries_configured(Path(argv[3])))
        return 0
    if len(argv) == 3 and argv[0] == "set-default":
        try:
            set_default(Path(argv[1]), int(argv[2]))
        except (IndexError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        return 0
    print("usage: python -m provisioner.sim.sota_boot snapshot ESP OUT | name ESP SNAPSHOT REPO | "
          "set-default ESP INDEX", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
