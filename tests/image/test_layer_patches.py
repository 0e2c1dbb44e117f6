"""The three LiteRT-LM/LiteRT patches: real unified diffs that apply with GNU patch to fixture copies
of the source regions (anchors, 2-space indentation, line numbers from notes/litert-lm.md), and
refuse a tree where an anchor changed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.image import litert_sources as src

FILES = Path(__file__).resolve().parents[2] / "layers/meta-edge-llm/recipes-ai/litert-lm/files"
P1 = FILES / "0001-litert_util-use-the-dispatch-library-dir-on-Linux.patch"
P2 = FILES / "0002-npu-executor-request-HTP-burst-mode-on-Linux.patch"
P3 = FILES / "0003-htp_backend-let-QNN-detect-the-SoC-on-aarch64.patch"


def patch(tree: Path, p: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["patch", "-p1", "--forward", "--fuzz=0", *args, "-i", str(p)], cwd=tree,
                          capture_output=True, text=True, timeout=30)


def test_patch_files_are_where_litert_build_expects_them():
    assert sorted(p.name for p in FILES.glob("000*.patch")) == [P1.name, P2.name, P3.name]


@pytest.mark.parametrize("p", [P1, P2, P3], ids=lambda p: p.name[:4])
def test_headers(p):
    text = p.read_text()
    head = text.split("\n---\n", 1)[0]
    assert head.startswith("From: ") and "\nSubject: [PATCH " in head
    assert "\nUpstream-Status: " in head and "\nSigned-off-by: " in head
    status = head.split("Upstream-Status: ", 1)[1].split()[0]
    assert status in {"Pending", "Inappropriate", "Backport", "Submitted", "Accepted", "Denied"}
    assert "\ndiff --git a/" in text and "\n--- a/" in text and "\n+++ b/" in text


def test_patches_apply_to_the_noted_regions(tmp_path):
    lm = src.write_tree(tmp_path / "litert-lm")
    rt = src.write_litert_tree(tmp_path / "litert")
    for tree, p in ((lm, P1), (lm, P2), (rt, P3)):
        dry = patch(tree, p, "--dry-run")
        assert dry.returncode == 0 and "offset" not in dry.stdout, dry.stdout + dry.stderr
        assert patch(tree, p).returncode == 0

    util = (lm / src.UTIL).read_text().splitlines()
    assert util[70] == "#if defined(__ANDROID__) || defined(__EMSCRIPTEN__) || defined(__linux__)"
    ex = (lm / src.EXECUTOR).read_text().splitlines()
    assert ex[56] == ex[495] == "#if defined(__ANDROID__) || defined(__linux__)"
    assert ex[496] == src.QNN_ASSIGN and ex[497] == src.QNN_ASSIGN_CONT  # 26-space continuation kept
    assert sum(ln == src.NEON_GUARD for ln in ex) == 3  # the ARM_NEON guards stay as they are
    htp = (rt / src.HTP).read_text().splitlines()
    assert htp[422] == "  std::vector<QnnDevice_CustomConfig_t> device_custom_configs;"  # still built
    assert htp[423] == "#if defined(__x86_64__) || defined(_M_X64)"
    assert htp[424:430] == src.SOC_LINES and htp[430] == "#endif"


def test_applied_twice_is_detected_not_doubled(tmp_path):
    lm = src.write_tree(tmp_path / "litert-lm")
    assert patch(lm, P2).returncode == 0
    before = (lm / src.EXECUTOR).read_text()
    again = patch(lm, P2, "--dry-run")
    assert again.returncode != 0 and "previously applied" in again.stdout
    assert patch(lm, P2, "--dry-run", "-R").returncode == 0  # idempotence check a build step can use
    assert (lm / src.EXECUTOR).read_text() == before


def test_refuses_a_tree_where_the_anchor_changed(tmp_path):
    other = src.write_tree(tmp_path / "other", util_guard="#if defined(__ANDROID__)",
                           change_496="#if defined(__ANDROID__) && !defined(__linux__)")
    for p in (P1, P2):
        r = patch(other, p, "--dry-run")
        assert r.returncode != 0 and "FAILED" in r.stdout, p.name
    # the include guard at line 57 gone: hunk 1 must not wander to line 496 and succeed
    lines = src.executor_cc().splitlines()
    lines[56] = "// include guard removed in another commit"
    (other / src.EXECUTOR).write_text("\n".join(lines) + "\n")
    assert patch(other, P2, "--dry-run").returncode != 0
    changed = list(src.SOC_LINES)
    changed[2] = "  htp_device_custom_config->option = QNN_HTP_DEVICE_CONFIG_OPTION_ARCH;"
    rt = src.write_litert_tree(tmp_path / "rt", soc_lines=changed)
    r = patch(rt, P3, "--dry-run")
    assert r.returncode != 0 and "FAILED" in r.stdout


def test_moved_anchor_is_reported_as_an_offset(tmp_path):
    """Same text a few lines away (another commit added lines above): patch applies but says so."""
    lm = src.write_tree(tmp_path / "lm", executor_shift=4)
    r = patch(lm, P2, "--dry-run")
    assert r.returncode == 0 and "offset 4 lines" in r.stdout
