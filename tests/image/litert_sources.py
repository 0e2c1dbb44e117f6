"""Fixture copies of the three source regions the layer's LiteRT-LM / LiteRT patches change.

LiteRT (patch 3): a VERBATIM excerpt, lines 421-433 of
``litert/vendors/qualcomm/core/backends/htp_backend.cc`` at google-ai-edge/LiteRT
d865fd82cd7fe6752908b3a0836895461c305679 (the LiteRT commit LiteRT-LM cbf463d97fa3 builds as
``@litert``), preceded by blank filler lines so the excerpt sits at its real line numbers and the
patch applies with ``--fuzz=0`` and no offset. Nothing else of that file is copied.

LiteRT-LM (patches 1 and 2): MODELLED, not excerpts. The files at cbf463d97fa3 were not available
to compare against, so these hold only the lines the patches themselves change (their anchors), at
the line numbers the patch headers state, with filler everywhere else. They test how the patches
and `provisioner litert build` behave, not that the patches fit the real files.

``shift`` moves a region or ``soc_lines`` / ``guard`` / ``change_496`` rewrite an anchor to model
"another commit" on which the patches must refuse to apply.
"""

from __future__ import annotations

from pathlib import Path

UTIL = "runtime/util/litert_util.cc"
EXECUTOR = "runtime/executor/llm_litert_npu_compiled_model_executor.cc"
HTP = "litert/vendors/qualcomm/core/backends/htp_backend.cc"

LITERT_COMMIT = "d865fd82cd7fe6752908b3a0836895461c305679"
HTP_FIRST_LINE = 421
# google-ai-edge/LiteRT @ d865fd82, litert/vendors/qualcomm/core/backends/htp_backend.cc:421-433,
# in HtpBackend::Init (verbatim; line 421 is blank).
HTP_EXCERPT = [
    "",
    "  // Device Handle",
    "  std::vector<QnnDevice_CustomConfig_t> device_custom_configs;",
    "  QnnHtpDevice_CustomConfig_t* htp_device_custom_config =",
    "      &AllocateHtpDeviceConfig();",
    "  htp_device_custom_config->option = QNN_HTP_DEVICE_CONFIG_OPTION_SOC;",
    "  htp_device_custom_config->socModel =",
    "      static_cast<uint32_t>(soc_info_.soc_model);",
    "  device_custom_configs.emplace_back(",
    "      static_cast<QnnDevice_CustomConfig_t>(htp_device_custom_config));",
    "",
    "#if defined(__x86_64__) || defined(_M_X64)",
    "  std::vector<QnnDevice_PlatformInfo_t*> device_platform_infos;",
]
SOC_FIRST_LINE = 424
# lines 424-430: allocate the SoC device custom config and emplace it (socModel takes two lines)
SOC_LINES = HTP_EXCERPT[SOC_FIRST_LINE - HTP_FIRST_LINE:431 - HTP_FIRST_LINE]
X86_GUARD = "#if defined(__x86_64__) || defined(_M_X64)"

# patch anchors (modelled LiteRT-LM files, see the module docstring)
UTIL_GUARD = "#if defined(__ANDROID__) || defined(__EMSCRIPTEN__)"
ANDROID_GUARD = "#if defined(__ANDROID__)"
NEON_GUARD = "#if defined(__ANDROID__) && defined(__ARM_NEON)"
QNN_ASSIGN = "  LITERT_ASSIGN_OR_RETURN(::litert::qualcomm::QualcommOptions & qnn_opts,"
QNN_ASSIGN_CONT = " " * 26 + "options.GetQualcommOptions());"


def _place(lines: dict[int, str], total: int) -> str:
    """A file of ``total`` lines with ``lines`` (1-based) at their numbers, filler elsewhere."""
    out = []
    for n in range(1, total + 1):
        out.append(lines.get(n, f"// filler line {n}"))
    return "\n".join(out) + "\n"


def util_cc(shift: int = 0, guard: str = UTIL_GUARD) -> str:
    """Modelled litert_util.cc: patch 1's guard at line 71, its ``#endif`` at 96."""
    return _place({71 + shift: guard, 96 + shift: "#endif"}, 140)


def executor_cc(shift: int = 0, change_496: str | None = None) -> str:
    """Modelled NPU executor: patch 2's guards at 57 and 496 (+ the two statement lines after 496)."""
    lines = {
        57: ANDROID_GUARD, 60: "#endif",
        140: NEON_GUARD, 142: "#endif",
        260: NEON_GUARD, 262: "#endif",
        380: NEON_GUARD, 382: "#endif",
        496 + shift: change_496 if change_496 is not None else ANDROID_GUARD,
        497 + shift: QNN_ASSIGN,
        498 + shift: QNN_ASSIGN_CONT,
        502 + shift: "#endif",
    }
    return _place(lines, 620)


def htp_backend_cc(shift: int = 0, soc_lines: list[str] | None = None) -> str:
    """The real excerpt at its real line numbers (blank lines before it); ``soc_lines`` replaces 424-430."""
    excerpt = list(HTP_EXCERPT)
    if soc_lines is not None:
        start = SOC_FIRST_LINE - HTP_FIRST_LINE
        excerpt[start:start + len(SOC_LINES)] = soc_lines
    return "\n" * (HTP_FIRST_LINE - 1 + shift) + "\n".join(excerpt) + "\n"


def write_tree(root: Path, **kwargs) -> Path:
    """Write the LiteRT-LM files (UTIL, EXECUTOR) under ``root``; kwargs: util_shift, executor_shift, ..."""
    (root / UTIL).parent.mkdir(parents=True, exist_ok=True)
    (root / EXECUTOR).parent.mkdir(parents=True, exist_ok=True)
    (root / UTIL).write_text(util_cc(kwargs.get("util_shift", 0), kwargs.get("util_guard", UTIL_GUARD)))
    (root / EXECUTOR).write_text(executor_cc(kwargs.get("executor_shift", 0), kwargs.get("change_496")))
    return root


def write_litert_tree(root: Path, shift: int = 0, soc_lines: list[str] | None = None) -> Path:
    """Write the LiteRT (@litert external) file HTP under ``root``."""
    (root / HTP).parent.mkdir(parents=True, exist_ok=True)
    (root / HTP).write_text(htp_backend_cc(shift, soc_lines))
    return root
