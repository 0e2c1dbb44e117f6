"""The namespace's accounts: host and board ``passwd``/``group``/``shadow`` merged, and written back.

Inside a board's namespace sshd and root come from the host while ``llm`` and ``fastrpc`` come from
the board's image, so the namespace's ``/etc`` gets a merge of both; what a playbook changes for a
board account (``usermod -aG fastrpc llm``) is written back into the board's rootfs when the
namespace stops, as it would persist on the UFS. Its own module because the merge rules (which ids
win, which accounts are protected) are one rule used at start and at stop.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

PROTECTED_USERS = ("root", "sshd", "nobody", "_apt")
PROTECTED_GROUPS = ("root", "nogroup", "_ssh", "shadow", "tty")


def read_db(path: Path) -> list[list[str]]:
    try:
        return [ln.split(":") for ln in path.read_text(errors="replace").splitlines() if ln and ":" in ln]
    except OSError:
        return []


def write_db(path: Path, rows: list[list[str]], mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(":".join(r) + "\n" for r in rows))
    os.chmod(path, mode)


def merge_accounts(host_etc: Path, board_etc: Path, out_etc: Path) -> dict[str, Any]:
    """Write passwd/group/shadow/gshadow for the namespace: the host's accounts (sshd, root) plus the
    board's own (``llm``, ``fastrpc``...). Board ids win over host ids that are not needed to log in.
    Returns {"users": [...], "groups": [...]} of board-only names (what is written back on stop)."""
    hp, bp = read_db(host_etc / "passwd"), read_db(board_etc / "passwd")
    hg, bg = read_db(host_etc / "group"), read_db(board_etc / "group")
    host_users = {r[0] for r in hp}
    host_groups = {r[0] for r in hg}
    b_users = [r for r in bp if len(r) >= 7 and r[0] not in host_users]
    b_groups = [r for r in bg if len(r) >= 4 and r[0] not in host_groups]
    b_uids = {r[2] for r in b_users}
    b_gids = {r[2] for r in b_groups}
    users = [r for r in hp if r[0] in PROTECTED_USERS or r[2] not in b_uids] + b_users
    groups = []
    board_members = {r[0]: r[3] for r in bg if len(r) >= 4}
    for r in hg:
        if r[0] not in PROTECTED_GROUPS and r[2] in b_gids:
            continue
        if r[0] in board_members and board_members[r[0]]:
            extra = [m for m in board_members[r[0]].split(",") if m and m not in host_users]
            mem = [m for m in r[3].split(",") if m] + [m for m in extra if m not in r[3].split(",")]
            r = r[:3] + [",".join(mem)]
        groups.append(r)
    groups += b_groups
    hs, bs = read_db(host_etc / "shadow"), read_db(board_etc / "shadow")
    b_shadow = {r[0]: r for r in bs}
    shadow = [r for r in hs if r[0] in {u[0] for u in users}]
    shadow += [b_shadow.get(r[0], [r[0], "*", "19000", "0", "99999", "7", "", "", ""]) for r in b_users]
    gshadow = [r for r in read_db(host_etc / "gshadow") if r[0] in {g[0] for g in groups}]
    gshadow += [[r[0], "!", "", r[3]] for r in b_groups]
    write_db(out_etc / "passwd", users)
    write_db(out_etc / "group", groups)
    write_db(out_etc / "shadow", shadow, 0o640)
    write_db(out_etc / "gshadow", gshadow, 0o640)
    return {"users": [r[0] for r in b_users], "groups": [r[0] for r in b_groups]}


def sync_accounts(upper_etc: Path, board_etc: Path, board_only: dict[str, Any], shells: dict[str, str]) -> None:
    """Write the board-only accounts as changed in the namespace (e.g. ``usermod -aG fastrpc llm``)
    back into the rootfs, so the change survives a reboot like it would on the UFS."""
    for db, names_key in (("passwd", "users"), ("group", "groups"), ("shadow", "users"), ("gshadow", "groups")):
        up = upper_etc / db
        if not up.is_file():
            continue
        ns_rows = {r[0]: r for r in read_db(up)}
        board_rows = read_db(board_etc / db)
        known = {r[0] for r in board_rows}
        names = set(board_only.get(names_key, []))
        # accounts created in the namespace that the host does not have are board accounts too
        host_names = {r[0] for r in read_db(Path("/etc") / db)}
        names |= {n for n in ns_rows if n not in host_names}
        out = []
        for r in board_rows:
            if r[0] in names and r[0] in ns_rows:
                r = list(ns_rows[r[0]])
            elif r[0] in names and r[0] not in ns_rows:
                continue           # deleted in the namespace
            elif db == "group" and r[0] in ns_rows and len(r) >= 4:
                host_mem = {m for m in ns_rows[r[0]][3].split(",") if m}
                r = r[:3] + [",".join(sorted(host_mem))] if r[3] != ns_rows[r[0]][3] else r
            if db == "passwd" and r[0] in shells and len(r) >= 7:
                r = r[:6] + [shells[r[0]]]
            out.append(r)
        for n in sorted(names - known):
            if n in ns_rows:
                r = list(ns_rows[n])
                if db == "passwd" and n in shells and len(r) >= 7:
                    r = r[:6] + [shells[n]]
                out.append(r)
        if board_rows or out:
            write_db(board_etc / db, out, 0o640 if "shadow" in db else 0o644)

