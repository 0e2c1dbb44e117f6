"""The runtime stand-in's own .litertlm header reader, on a real file LiteRT-LM's tooling wrote.

``litert_lm_main``'s stand-in decides "fails to load" from the container's section table, like the
real loader (google-ai-edge/LiteRT-LM schema/core/litertlm_read.cc, runtime/util/memory_mapped_file_posix.cc),
so a cut file fails even when a model.json beside it declares the cut size. No board needed here.
"""

from __future__ import annotations

import shutil

from provisioner.sim.model_files import litertlm_extent
from provisioner.sim.synthetic_models import make_litertlm
from tests.conftest import REALWORLD, need_realworld

REAL = REALWORLD / "litertlm" / "test_hf_tokenizer.litertlm"


def test_a_real_litertlm_fits_its_section_table_and_a_cut_copy_does_not(tmp_path):
    need_realworld("litertlm", "test_hf_tokenizer.litertlm")
    extent = litertlm_extent(REAL)
    assert extent is not None and 32 < extent <= REAL.stat().st_size       # loads whole
    cut = tmp_path / "cut.litertlm"
    shutil.copyfile(REAL, cut)
    with open(cut, "r+b") as fh:
        fh.truncate(extent - 1)                                             # one byte short of its last section
    assert litertlm_extent(cut) == extent


def test_a_cut_synthetic_model_declares_more_than_it_holds(tmp_path):
    whole = make_litertlm(tmp_path / "whole.litertlm", n_dispatch_ops=9)
    cut = make_litertlm(tmp_path / "cut.litertlm", n_dispatch_ops=9, truncate_to=20000)
    assert litertlm_extent(whole) == whole.stat().st_size
    assert litertlm_extent(cut) == whole.stat().st_size > cut.stat().st_size
    short = make_litertlm(tmp_path / "short.litertlm", truncate_to=100)    # inside the header itself
    assert litertlm_extent(short) > 100


def test_not_a_litertlm_container_is_left_to_model_json(tmp_path):
    other = tmp_path / "other.litertlm"
    other.write_bytes(b"TFL3" + bytes(60))
    assert litertlm_extent(other) is None
