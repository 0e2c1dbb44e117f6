"""The three LiteRT-LM/LiteRT patches: real unified diffs that apply with GNU patch (and patch 3 with
`git apply`) to fixture copies of the source regions (tests/image/litert_sources.py: a verbatim
excerpt of LiteRT d865fd82 for patch 3, modelled anchors for patches 1 and 2), and refuse a tree
where an anchor changed."""

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
    assert htp[423] == src.X86_GUARD
    assert htp[424:431] == src.SOC_LINES and htp[431] == "#endif"
    assert htp[432:435] == ["", src.X86_GUARD, "  std::vector<QnnDevice_PlatformInfo_t*> device_platform_infos;"]


def _guards_of(lines: list[str], needle: str) -> tuple[str, str]:
    """The preprocessor lines right before and after the line containing ``needle`` ("" if none)."""
    at = next(i for i, ln in enumerate(lines) if needle in ln)
    before = next((ln for ln in reversed(lines[:at]) if ln.startswith("#")), "")
    after = next((ln for ln in lines[at + 1:] if ln.startswith("#")), "")
    return before, after


def test_on_aarch64_no_soc_config_is_forced(tmp_path):
    """QLI: only an x86_64 (offline) build sets QNN_HTP_DEVICE_CONFIG_OPTION_SOC; aarch64 lets QNN detect it."""
    rt = src.write_litert_tree(tmp_path / "litert")
    before = (rt / src.HTP).read_text().splitlines()
    assert _guards_of(before, "QNN_HTP_DEVICE_CONFIG_OPTION_SOC")[0] != src.X86_GUARD  # unguarded upstream
    assert patch(rt, P3).returncode == 0
    lines = (rt / src.HTP).read_text().splitlines()
    for needle in ("&AllocateHtpDeviceConfig()", "QNN_HTP_DEVICE_CONFIG_OPTION_SOC",
                   "static_cast<uint32_t>(soc_info_.soc_model)", "device_custom_configs.emplace_back("):
        assert _guards_of(lines, needle) == (src.X86_GUARD, "#endif"), needle
    # the vector itself stays outside the guard: the device_configs loop below reads it on every arch
    assert _guards_of(lines, "std::vector<QnnDevice_CustomConfig_t> device_custom_configs;")[1] == src.X86_GUARD


def test_patch_3_passes_git_apply_check_on_the_real_excerpt(tmp_path):
    rt = src.write_litert_tree(tmp_path / "litert")
    subprocess.run(["git", "init", "-q"], cwd=rt, check=True, capture_output=True)
    r = subprocess.run(["git", "apply", "--check", "-v", str(P3)], cwd=rt, capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("p", [P1, P2, P3], ids=lambda p: p.name[:4])
def test_diffstat_matches_the_hunks(p):
    """The header's "N insertions(+), M deletions(-)" is what the hunks really do."""
    text = p.read_text()
    body = text.split("\ndiff --git ", 1)[1].splitlines()
    hunk = [ln for ln in body if not ln.startswith(("--- ", "+++ ", "@@", "diff "))]
    plus = sum(ln.startswith("+") for ln in hunk)
    minus = sum(ln.startswith("-") for ln in hunk)
    ins = f"{plus} insertion{'s' if plus != 1 else ''}(+)"
    dels = f"{minus} deletion{'s' if minus != 1 else ''}(-)"
    assert f" 1 file changed, {ins}, {dels}" in text


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
    # the socModel assignment on one line (not how d865fd82 writes it): refused, not half-applied
    one_line = [*src.SOC_LINES[:3], "  htp_device_custom_config->socModel = soc_info_.soc_model;",
                *src.SOC_LINES[5:]]
    rt1 = src.write_litert_tree(tmp_path / "rt1", soc_lines=one_line)
    r = patch(rt1, P3, "--dry-run")
    assert r.returncode != 0 and "FAILED" in r.stdout


def test_moved_anchor_is_reported_as_an_offset(tmp_path):
    """Same text a few lines away (another commit added lines above): patch applies but says so."""
    lm = src.write_tree(tmp_path / "lm", executor_shift=4)
    r = patch(lm, P2, "--dry-run")
    assert r.returncode == 0 and "offset 4 lines" in r.stdout
