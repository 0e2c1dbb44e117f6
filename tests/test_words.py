"""What a user reads cites public sources, never the project's internal notes or seed scenarios."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREES = ("provisioner", "layers", "playbooks", "kas", "examples", "inventory")
# 'seed' alone stays legal: Genie's sampler "seed" and LiteRT-LM's LiteRtLmSamplerParams.seed are real fields
INTERNAL = re.compile(r"\bseeds\b|\bseed[- ]\d{3}\b|\bthe seed'?s?\b|seed-derived|\.\./shared|\bnotes/", re.I)


def _texts():
    yield ROOT / "README.md"
    for tree in TREES:
        for p in sorted((ROOT / tree).rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".png", ".gz"):
                yield p


def test_no_words_point_outside_the_product():
    found = []
    for p in _texts():
        try:
            text = p.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        found += [f"{p.relative_to(ROOT)}:{n}: {ln.strip()[:90]}" for n, ln in enumerate(text.splitlines(), 1)
                  if INTERNAL.search(ln)]
    assert not found, "cite a public source (or nothing):\n" + "\n".join(found)


def test_json_diagnoses_cite_public_sources():
    from provisioner.fleet.shared import diagnosis

    for key, d in diagnosis.DIAGNOSES.items():
        assert not INTERNAL.search(d.source) and "seed" not in d.source.lower(), (key, d.source)
