"""The layer's README restates the board contract for people: its tables and paths stay equal to it."""

from __future__ import annotations

import re
import sys

import pytest

from provisioner.contracts import board, memlock
from tests.image import bbparse

README = bbparse.LAYER / "README.md"
#: paths the README names that are the layer's own business (recipe variables), not the board contract
LAYER_ONLY = {
    "/etc/ssh/sshd_config.d/50-edge-llm.conf",           # EDGE_LLM_SSHD_DROPIN (edge-llm-login.bb)
    "/usr/lib/edge-llm/opt/...",                         # EDGE_LLM_OPT_STORE on a sota image
    "/usr/lib/tmpfiles.d/edge-llm-<pn>.conf",            # EDGE_LLM_TMPFILES_CONF on a sota image
    "/usr/share/edge-llm/ssh/root/authorized_keys",      # EDGE_LLM_SSH_KEYS_DIR on a sota image
}


def _rows() -> dict[str, str]:
    """variable -> its default cell, for the README's table rows that name one variable."""
    rows = {}
    for line in README.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) >= 2 and re.fullmatch(r"`[A-Z][A-Z0-9_]*`", cells[0]):
            rows[cells[0].strip("`")] = cells[1]
    return rows


def _contract_paths() -> set[str]:
    return {v for k, v in vars(board).items() if k.isupper() and isinstance(v, str) and v.startswith("/")}


def test_table_defaults_are_the_contracts_values():
    """Each board-path and memlock variable has a row whose default is the contract's value."""
    rows = _rows()
    wanted = {**board.layer_variables(), **memlock.layer_variables()}
    text = README.read_text(encoding="utf-8")
    missing = [k for k in wanted if f"`{k}`" not in text]
    assert not missing, f"{README.name} names no row for {missing}"
    wrong = {k: (rows[k], v) for k, v in wanted.items()
             if k in rows and not rows[k].startswith(f"`{v}`")}
    assert not wrong, f"{README.name} table default differs from the contract (row, contract): {wrong}"
    assert len(set(wanted) & set(rows)) >= len(wanted) - 3          # only the memlock files share one row


def test_every_edge_llm_path_the_readme_names_is_the_contracts():
    """A path with edge-llm in it is a contract path or under one (a stale copy fails here), or a named
    layer-only path."""
    paths = _contract_paths()
    named = set(re.findall(r"`(/[^`\s]*edge-llm[^`\s]*)`", README.read_text(encoding="utf-8")))
    stale = sorted(p for p in named - LAYER_ONLY
                   if p not in paths and not any(p.startswith(c.rstrip("/") + "/") for c in paths))
    assert not stale, f"{README.name} names board paths contracts/board.py does not: {stale}"
    assert named >= LAYER_ONLY                                      # the exceptions are still in use


def test_a_stale_copy_is_caught(monkeypatch, tmp_path):
    here = sys.modules[__name__]
    stale = tmp_path / "README.md"
    cases = (("| `/opt/edge-llm/models` |", "| `/opt/models` |", test_table_defaults_are_the_contracts_values),
             ("`/usr/bin/edge-llm-serve`", "`/usr/sbin/edge-llm-serve`",
              test_every_edge_llm_path_the_readme_names_is_the_contracts))
    for old, new, check in cases:
        text = README.read_text(encoding="utf-8")
        assert old in text
        stale.write_text(text.replace(old, new), encoding="utf-8")
        monkeypatch.setattr(here, "README", stale)
        with pytest.raises(AssertionError):
            check()
        monkeypatch.setattr(here, "README", README)
