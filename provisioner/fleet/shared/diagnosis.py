"""Fleet diagnosis: the known failure causes and the runtime log signatures that point at them.

Every failed verify check names a key of :data:`DIAGNOSES`; the report shows its cause, remedy and a
public source the user can open. :func:`diagnose_log` maps a runtime's log (LiteRT-LM's
litert_lm_main, Genie's genie-t2t-run) to such a key. One place for the catalogue, so the verdict
(:mod:`provisioner.fleet.verify`) and the words test read the same entries.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from provisioner.contracts import board as on_board


@dataclass(frozen=True)
class Diagnosis:
    """The cause of a failure, what to do about it, and a public source the user can open."""

    cause: str
    remedy: str
    source: str


# Public sources a user can open, shared by several diagnoses
_FASTRPC_SRC = "meta-qcom recipes-support/fastrpc/fastrpc_1.0.6.bb (ef0004df); github.com/qualcomm/fastrpc"
_QAIRT_SRC = "QAIRT docs (Qualcomm AI Runtime SDK): HTP backend, context binaries and libQnnHtp*Skel per build"
_SOC_SRC = "QAIRT docs (Qualcomm AI Runtime SDK): htp_backend_ext_config.json soc_model / dsp_arch"
_MEMLOCK_SRC = "systemd.exec(5) LimitMEMLOCK=; limits.conf(5) applies to PAM sessions only"

# symptom key -> diagnosis (the failure signatures the runtimes print on QLI 2.0 boards)
DIAGNOSES: dict[str, Diagnosis] = {
    "wrong-board": Diagnosis("the board is not the type its inventory group says",
                             "move the host to the group of the board it is (or reflash it)", "inventory"),
    "release": Diagnosis("the board runs another image build than the fleet expects",
                         "flash the expected release (provisioner station) or update edge_llm_expected_build_id",
                         "release manifest"),
    "fastrpc-missing": Diagnosis("FastRPC userspace or device missing: the runtime cannot reach the cDSP "
                                 "(Genie reports 'Failed to create device: 14001')",
                                 "install QLI's fastrpc package, enable cdsprpcd.service", _FASTRPC_SRC),
    "fastrpc-perms": Diagnosis(f"{on_board.FASTRPC_DEVICE} is not what fastrpc's udev rule sets "
                               "(fastrpc:fastrpc 0660): the service user cannot open it, or users outside group "
                               "fastrpc can",
                               "restore fastrpc's 60-fastrpc.rules (no later rule may change OWNER/GROUP/MODE), "
                               f"then udevadm trigger {on_board.FASTRPC_DEVICE}; the service user joins group "
                               "fastrpc",
                               "github.com/qualcomm/fastrpc files/60-fastrpc.rules (05b9e02); meta-qcom "
                               "recipes-support/fastrpc/fastrpc_1.0.6.bb (ef0004df)"),
    "fastrpc-group": Diagnosis(f"the inference user is not in group fastrpc: it cannot open {on_board.FASTRPC_DEVICE} "
                               "(Genie: 'Failed to create device: 14001')",
                               "usermod -aG fastrpc <user> (the image's EXTRA_USERS_PARAMS / the serve unit's "
                               "SupplementaryGroups=fastrpc)", _FASTRPC_SRC),
    "cdsprpcd": Diagnosis("cdsprpcd.service is not active", "systemctl enable --now cdsprpcd.service",
                          _FASTRPC_SRC),
    "qairt-missing": Diagnosis("the model's exact QAIRT build is not installed (host libs and skel must come from "
                               "the build the context binaries were compiled with)",
                               "deploy QAIRT <version> (provisioner fleet deploy) or rebuild the image with it",
                               _QAIRT_SRC),
    "qairt-mismatch": Diagnosis("QAIRT on the board differs from the build the model needs (stub/skel or context "
                                "binary version mismatch)",
                                "install the exact QAIRT build and point LD_LIBRARY_PATH/ADSP_LIBRARY_PATH at it",
                                _QAIRT_SRC),
    "runtime-missing": Diagnosis("the runtime (litert_lm_main or genie-t2t-run) is not installed where the layout "
                                 "says", "deploy the runtime (provisioner fleet deploy)", "layout"),
    "truncated-model": Diagnosis("the model file is truncated or corrupted (LiteRT: 'TF_LITE_PREFILL_DECODE not "
                                 "found', mmap errors)", "re-download it and check size and sha256 "
                                 "(provisioner fleet deploy re-fetches it)", "release manifest (size, sha256)"),
    "model-missing": Diagnosis("the model is not installed (no current version)",
                               "deploy it (provisioner fleet deploy)", "layout"),
    "soc-model": Diagnosis("htp_backend_ext_config.json / context binaries target another soc_model: loads without "
                           "error, then garbage after the first tokens",
                           "export/compile the bundle for this board (soc_model/dsp_arch from the catalog)",
                           _SOC_SRC),
    "garbage": Diagnosis("output right for a token or two, then garbage: context binary compiled with the wrong "
                         "or generic soc_model (0)",
                         "recompile with soc_model/dsp_arch set for this board and redeploy",
                         _SOC_SRC),
    "memlock": Diagnosis("locked-memory limit too low (QLI default 8 MB); FastRPC must pin ~1.17 GB "
                         "('Could not allocate persistent weights buffer!', cDSP may crash)",
                         "image.memlock unlimited (or >= 2 GiB) in the manifest and a rebuilt image: its "
                         "edge-llm-memlock package sets limits.d for shells and LimitMEMLOCK= for the service "
                         "(limits.conf does not apply to systemd)", _MEMLOCK_SRC),
    "soc-config-14001": Diagnosis("LiteRT forces a SoC custom config that QLI's QNN rejects "
                                  "('QnnDevice_create ... 14001')",
                                  "rebuild litert_lm_main with patch 3 (SoC guard)",
                                  "layers/meta-edge-llm/recipes-ai/litert-lm/files/0003-htp_backend-let-QNN-detect-the-SoC-on-aarch64.patch"),
    "no-burst": Diagnosis("burst mode never requested on Linux: decode ~16 tok/s, 'Null Qualcomm options'",
                          "rebuild litert_lm_main with patch 2 (HTP burst on Linux)",
                          "layers/meta-edge-llm/recipes-ai/litert-lm/files/0002-npu-executor-request-HTP-burst-mode-on-Linux.patch"),
    "dispatch-dir": Diagnosis("libLiteRtDispatch_Qualcomm.so not found: litert_lm_main sets no dispatch dir, "
                              "so LiteRT looks only beside --model_path ('NPU accelerator could not be loaded')",
                              "give --model_path as a link in a directory that also links the runtime's "
                              "lib/libLiteRtDispatch_Qualcomm.so (the fleet's smoke run does), and build "
                              "litert_lm_main with patch 1",
                              "layers/meta-edge-llm/recipes-ai/litert-lm/files/0001-litert_util-use-the-dispatch-library-dir-on-Linux.patch"),
    "cpu-backend": Diagnosis("CPU backend asked for an NPU-only model", "run with --backend npu", "model.json backend"),
    "slow": Diagnosis("decode slower than the reference floor", "check burst mode, thermal state and CPU governor; "
                      "compare like with like (same output length)", "catalog models.yaml decode floor"),
    "slower-than-factory": Diagnosis("decode is slower than this board's own smoke inference at the factory "
                                     "by more than the release allows (verify.baseline_max_drop)",
                                     "check thermal state, burst mode and what else runs on the NPU; the same board "
                                     "was faster when it left the line", "station records: the factory baseline"),
    "ttft": Diagnosis("time to first token above the floor", "check burst mode and that nothing else uses the NPU",
                      "catalog models.yaml TTFT ceiling"),
    "download-mode": Diagnosis("qcom_scm download_mode differs from the fleet policy (1 parks a crashed board in "
                               "EDL ramdump 900e until power-cycled)",
                               f"echo 0 > {on_board.DOWNLOAD_MODE_PARAM}, or boot with "
                               "qcom_scm.download_mode=0", "Linux drivers/firmware/qcom/qcom_scm.c download_mode"),
    "smoke-failed": Diagnosis("the smoke inference failed", "read the log tail in the report", "fleet"),
    "probe": Diagnosis("the board could not be probed", "check SSH access and python3 on the board", "fleet"),
}

# Log signatures -> diagnosis key, most specific first.
SIGNATURES: list[tuple[re.Pattern[str], str, str | None]] = [
    (re.compile(r"Could not allocate persistent weights buffer"), "memlock", None),
    (re.compile(r"TF_LITE_PREFILL_DECODE not found|failed to mmap|mmap .*failed|truncated", re.I),
     "truncated-model", None),
    (re.compile(r"Main backend constraint mismatch"), "cpu-backend", None),
    (re.compile(r"NPU accelerator could not be loaded|DISPATCH_OP failed to prepare"), "dispatch-dir", None),
    (re.compile(r"Stub lib id mismatch|stub/skel|skel.*mismatch|version mismatch|QAIRT.*(mismatch|newer|older)|"
                r"[Cc]ontext binary (was built with|.*(newer|older|incompatible))|Incompatible .*version|"
                r"createFromBinary failed with error 5001", re.I), "qairt-mismatch", None),
    (re.compile(r"Failed to set up QNN manager|QnnDevice_create.*14001|14001"), "soc-config-14001", "litert_lm"),
    (re.compile(r"Failed to create device: 14001|Device Creation failure|14001"), "fastrpc-missing", "genie"),
    (re.compile(r"Null Qualcomm options"), "no-burst", None),
]


def diagnose_log(text: str, runtime: str) -> str | None:
    """Diagnosis key for a runtime log (None when no known signature is in it)."""
    for pattern, key, only in SIGNATURES:
        if only and only != runtime:
            continue
        if pattern.search(text):
            return key
    return None
