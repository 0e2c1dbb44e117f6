"""Fixture copies of the three LiteRT-LM / LiteRT source regions the layer's patches change.

Written from notes/litert-lm.md (anchors, 2-space indentation, line numbers at LiteRT-LM
cbf463d97fa3 / LiteRT d865fd82): every anchor sits at the noted line; the rest of each file is
filler so line numbers are real. ``move`` shifts an anchor or ``change`` rewrites it to model
"another commit" on which the patches must refuse to apply.
"""

from __future__ import annotations

from pathlib import Path

UTIL = "runtime/util/litert_util.cc"
EXECUTOR = "runtime/executor/llm_litert_npu_compiled_model_executor.cc"
HTP = "litert/vendors/qualcomm/core/backends/htp_backend.cc"

UTIL_GUARD = "#if defined(__ANDROID__) || defined(__EMSCRIPTEN__)"
ANDROID_GUARD = "#if defined(__ANDROID__)"
NEON_GUARD = "#if defined(__ANDROID__) && defined(__ARM_NEON)"
QNN_ASSIGN = "  LITERT_ASSIGN_OR_RETURN(::litert::qualcomm::QualcommOptions & qnn_opts,"
QNN_ASSIGN_CONT = " " * 26 + "options.GetQualcommOptions());"
SOC_LINES = [
    "  QnnHtpDevice_CustomConfig_t* htp_device_custom_config =",
    "      &AllocateHtpDeviceConfig();",
    "  htp_device_custom_config->option = QNN_HTP_DEVICE_CONFIG_OPTION_SOC;",
    "  htp_device_custom_config->socModel = soc_info_.soc_model;",
    "  device_custom_configs.emplace_back(",
    "      static_cast<QnnDevice_CustomConfig_t>(htp_device_custom_config));",
]


def _place(lines: dict[int, str], total: int) -> str:
    """A file of ``total`` lines with ``lines`` (1-based) at their numbers, filler elsewhere."""
    out = []
    for n in range(1, total + 1):
        out.append(lines.get(n, f"// filler line {n}"))
    return "\n".join(out) + "\n"


def util_cc(shift: int = 0, guard: str = UTIL_GUARD) -> str:
    return _place({71 + shift: guard, 72 + shift: "  // dispatch library dir for the NPU accelerator",
                   96 + shift: "#endif"}, 140)


def executor_cc(shift: int = 0, change_496: str | None = None) -> str:
    lines = {
        57: ANDROID_GUARD,
        58: '#include "litert/cc/options/litert_google_tensor_options.h"  // from @litert',
        59: '#include "litert/cc/options/litert_qualcomm_options.h"  // from @litert',
        60: "#endif",
        140: NEON_GUARD, 141: "  // neon path", 142: "#endif",
        260: NEON_GUARD, 261: "  // neon path", 262: "#endif",
        380: NEON_GUARD, 381: "  // neon path", 382: "#endif",
        495 + shift: "  // Qualcomm options: quiet logs, burst performance mode.",
        496 + shift: change_496 if change_496 is not None else ANDROID_GUARD,
        497 + shift: QNN_ASSIGN,
        498 + shift: QNN_ASSIGN_CONT,
        499 + shift: "  qnn_opts.SetLogLevel(::litert::qualcomm::QualcommOptions::LogLevel::kOff);",
        500 + shift: "  qnn_opts.SetHtpPerformanceMode(",
        501 + shift: "      ::litert::qualcomm::QualcommOptions::HtpPerformanceMode::kBurst);",
        502 + shift: "#endif",
    }
    return _place(lines, 620)


def htp_backend_cc(shift: int = 0, soc_lines: list[str] | None = None) -> str:
    lines = {422 + shift: "  // Device Handle",
             423 + shift: "  std::vector<QnnDevice_CustomConfig_t> device_custom_configs;"}
    for i, text in enumerate(soc_lines if soc_lines is not None else SOC_LINES):
        lines[424 + shift + i] = text
    lines[430 + shift] = ""
    lines[431 + shift] = "  std::vector<const QnnDevice_Config_t*> device_configs;"
    return _place(lines, 520)


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
