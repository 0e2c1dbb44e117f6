"""Where things live on a board: the on-target filesystem contract between the image and the fleet.

The Yocto layer installs to these paths, the fleet playbooks verify and deploy to them, the
inference service runs from them, and the virtual boards present them. Keeping the contract
in one module (rendered into the layer's ``EDGE_LLM_*`` variables by :func:`layer_variables`, and
into group_vars from here) is what stops those parts from drifting apart. Modules that also name a
:class:`~provisioner.catalog.Board` ``board`` import this one as ``on_board``.

Versioned directories everywhere: several QAIRT builds live side by side (one per model), and
a model update lands next to the previous one with an atomic ``current`` symlink switch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provisioner import shipped
from provisioner.catalog import Board
from provisioner.contracts import pins

QAIRT_ROOT = "/opt/qairt"                   # /opt/qairt/<build>/ (never /usr/lib: meta-qcom's 2.47 lives there)
LITERT_ROOT = "/opt/litert-lm"              # /opt/litert-lm/<rev>/{bin,lib}
LITERT_REV = pins.LITERT_LM_REV             # /opt/litert-lm/<rev>: the pinned LiteRT-LM commit
LITERT_QAIRT = pins.LITERT_LM_QAIRT         # the QAIRT build that runtime is compiled against
MODELS_ROOT = "/opt/edge-llm/models"        # /opt/edge-llm/models/<name>/<version>/ + current -> <version>
ETC_DIR = "/etc/edge-llm"                   # release.json, serve/<model>.json
RELEASE_JSON = "/etc/edge-llm/release.json"
OS_RELEASE = "/etc/os-release"              # BUILD_ID = manifest release id
# agetty prints /etc/issue.d/*.issue before every login prompt and expands \S{BUILD_ID} from
# os-release: the console shows the release even where root cannot log in (production images).
ISSUE_SNIPPET = "/etc/issue.d/50-edge-llm.issue"
ISSUE_TEXT = "edge-llm release \\S{BUILD_ID}\n\n"
BANNER_RELEASE_PREFIX = "edge-llm release "
# The board's identity on the console, for production images where root cannot log in: the layer's
# edge-llm-identity.service writes IDENTITY_RUN_FILE at every boot (after sshdgenkeys.service, before
# getty-pre.target) and IDENTITY_ISSUE links to it; agetty lists symlinks in issue.d too
# (util-linux term-utils/agetty.c issuedir_filter accepts DT_LNK). Lines: "edge-llm id serial <n>",
# "edge-llm id ufs-serial <s>", "edge-llm id hostkey <type> <base64>".
IDENTITY_ISSUE = "/etc/issue.d/60-edge-llm-identity.issue"
IDENTITY_RUN_FILE = "/run/edge-llm/identity.issue"
IDENTITY_SCRIPT = "/usr/libexec/edge-llm-identity"
BANNER_IDENTITY_PREFIX = "edge-llm id "
SOC0_SERIAL = "/sys/devices/soc0/serial_number"
# the UFS device descriptor's serial (Documentation/ABI/testing/sysfs-driver-ufs): under the UFS host
# controller's platform device, whatever its driver is called (ufshcd-qcom on Qualcomm)
UFS_SERIAL_GLOB = "/sys/bus/platform/devices/*/string_descriptors/serial_number"
# where oe-core's sshd_config puts the host keys sshd_check_keys generates at first boot
SSH_HOST_KEY_GLOB = "/etc/ssh/ssh_host_*_key.pub"
# the memlock writers' files (the values: provisioner.contracts.memlock)
LIMITS_FILE = "/etc/security/limits.d/50-edge-llm-memlock.conf"
SYSTEMD_MEMLOCK_DROPIN = "/etc/systemd/system.conf.d/50-edge-llm-memlock.conf"
SERVE_UNIT = "edge-llm-serve@.service"      # instance = model name
SERVE_UNIT_DIR = "/etc/systemd/system"
# the image's drop-in for every instance of the serve unit (edge-llm-memlock.bb)
SERVE_MEMLOCK_DROPIN = "/etc/systemd/system/edge-llm-serve@.service.d/50-edge-llm-memlock.conf"
# the fleet's per-model drop-in (fleet launch): the model's QAIRT environment
SERVE_MODEL_DROPIN_NAME = "50-edge-llm-model.conf"
SERVE_BIN = "/usr/bin/edge-llm-serve"
SERVE_CONFIG_DIR = "/etc/edge-llm/serve"    # <model>.json per instance (edge-llm-serve --config)
TOKEN_FILE = "/etc/edge-llm/serve/api-token"  # the board's bearer token (service user, 0600)
SERVE_BASE_PORT = 8080                      # model i listens on 8080 + i (configurable)
FASTRPC_DEVICE = "/dev/fastrpc-cdsp"
FASTRPC_GROUP = "fastrpc"
# What fastrpc's udev rule sets on /dev/fastrpc-cdsp (github.com/qualcomm/fastrpc files/60-fastrpc.rules,
# commit 05b9e02, installed by meta-qcom recipes-support/fastrpc/fastrpc_1.0.6.bb @ ef0004df):
# OWNER="fastrpc", GROUP="fastrpc", MODE="0660". Anything wider lets every local user drive the cDSP.
FASTRPC_OWNER = "fastrpc"
FASTRPC_MODE = 0o660
FASTRPC_LIB = "/usr/lib/libcdsprpc.so"
FASTRPC_SERVICE = "cdsprpcd.service"
DOWNLOAD_MODE_PARAM = "/sys/module/qcom_scm/parameters/download_mode"
SOC0_MACHINE = "/sys/devices/soc0/machine"
SOC0_SOC_ID = "/sys/devices/soc0/soc_id"
DT_COMPATIBLE = "/proc/device-tree/compatible"
DT_MODEL = "/proc/device-tree/model"
KERNEL_CMDLINE = "/proc/cmdline"
MODEL_META = "model.json"                   # beside each model version: name, kind, qairt, sha256, size, files


def layer_variables() -> dict[str, str]:
    """The board paths as the layer's ``EDGE_LLM_*`` variables (render puts them in the ``edge-llm`` entry).

    The recipes read these instead of restating the paths; the layer's ``conf/edge-llm-board.conf`` holds
    the same values as ``??=`` defaults for a layer parsed without render (tests/image/test_layer.py keeps
    the two equal).
    """
    return {
        "EDGE_LLM_QAIRT_ROOT": QAIRT_ROOT,
        "EDGE_LLM_LITERT_ROOT": LITERT_ROOT,
        "EDGE_LLM_MODELS_ROOT": MODELS_ROOT,
        "EDGE_LLM_RELEASE_FILE": RELEASE_JSON,
        "EDGE_LLM_ISSUE_FILE": ISSUE_SNIPPET,
        "EDGE_LLM_IDENTITY_ISSUE": IDENTITY_ISSUE,
        "EDGE_LLM_IDENTITY_RUNFILE": IDENTITY_RUN_FILE,
        "EDGE_LLM_IDENTITY_SCRIPT": IDENTITY_SCRIPT,
        "EDGE_LLM_SOC0_SERIAL": SOC0_SERIAL,
        "EDGE_LLM_UFS_SERIAL_GLOB": UFS_SERIAL_GLOB,
        "EDGE_LLM_SSH_HOST_KEY_GLOB": SSH_HOST_KEY_GLOB,
        "EDGE_LLM_LIMITS_FILE": LIMITS_FILE,
        "EDGE_LLM_SYSTEMD_DROPIN": SYSTEMD_MEMLOCK_DROPIN,
        "EDGE_LLM_SERVE_DROPIN": SERVE_MEMLOCK_DROPIN,
        "EDGE_LLM_SERVE_UNIT": SERVE_UNIT,
        "EDGE_LLM_SERVE_BIN": SERVE_BIN,
        "EDGE_LLM_SERVE_CONFIG_DIR": SERVE_CONFIG_DIR,
        "EDGE_LLM_FASTRPC_DEVICE": FASTRPC_DEVICE,
        "EDGE_LLM_FASTRPC_GROUP": FASTRPC_GROUP,
        "EDGE_LLM_FASTRPC_SERVICE": FASTRPC_SERVICE,
        "EDGE_LLM_DOWNLOAD_MODE_PARAM": DOWNLOAD_MODE_PARAM,
    }


#: the layer's template unit: the one text of edge-llm-serve@.service, with ``@EDGE_LLM_*@`` placeholders
SERVE_UNIT_SOURCE = shipped.serve_dir() / SERVE_UNIT
SERVE_UNIT_USER = "EDGE_LLM_INFERENCE_USER"


def fill_layer_file(source: Path, extra: dict[str, str] | None = None) -> str:
    """A layer file as its recipe installs it: each ``@EDGE_LLM_*@`` placeholder replaced by the variable's value.

    The recipes' do_install substitute the same names (sed) from the same variables (:func:`layer_variables`
    plus ``extra``). A placeholder no variable fills is a ValueError (a new one must be added here).
    """
    values = {**layer_variables(), **(extra or {})}
    text = source.read_text(encoding="utf-8")

    def fill(m: re.Match[str]) -> str:
        if m.group(1) not in values:
            raise ValueError(f"{source}: no value for @{m.group(1)}@")
        return values[m.group(1)]

    return re.sub(r"@([A-Z][A-Z0-9_]*)@", fill, text)


def serve_unit_text(user: str) -> str:
    """The serve unit as the image installs it, so an image's unit and the one ``fleet launch`` writes are
    one text."""
    return fill_layer_file(SERVE_UNIT_SOURCE, {SERVE_UNIT_USER: user})


#: the layer's board identity script, reading the soc0/UFS serial and host key paths as placeholders
IDENTITY_SCRIPT_SOURCE = shipped.layer_dir() / "recipes-core" / "edge-llm-identity" / "files" / "edge-llm-identity"


def identity_script_text() -> str:
    """edge-llm-identity as the image installs it at :data:`IDENTITY_SCRIPT` (the virtual image writes it too)."""
    return fill_layer_file(IDENTITY_SCRIPT_SOURCE)


def qairt_dir(version: str) -> str:
    return f"{QAIRT_ROOT}/{version}"


def qairt_host_lib_dir(board: Board, version: str) -> str:
    return f"{qairt_dir(version)}/{board.qairt_host_lib_dir}"


def qairt_skel_dir(board: Board, version: str) -> str:
    return f"{qairt_dir(version)}/{board.qairt_skel_dir}"


def qairt_bin_dir(version: str) -> str:
    return f"{qairt_dir(version)}/bin/aarch64-oe-linux-gcc11.2"


def litert_dir(rev: str = LITERT_REV) -> str:
    return f"{LITERT_ROOT}/{rev}"


def model_dir(name: str) -> str:
    return f"{MODELS_ROOT}/{name}"


def model_version_dir(name: str, version: str) -> str:
    return f"{MODELS_ROOT}/{name}/{version}"


def model_current(name: str) -> str:
    return f"{MODELS_ROOT}/{name}/current"


def model_version_id(sha256: str | None, fallback: str) -> str:
    """Directory name of one model version: the first 16 hex digits of its sha256 when known."""
    return sha256[:16] if sha256 else fallback


@dataclass(frozen=True)
class RunEnv:
    """Environment a runtime needs on the board (the QAIRT docs' run environment for HTP on Linux)."""

    ld_library_path: str
    adsp_library_path: str
    path_prefix: str

    def as_env(self) -> dict[str, str]:
        return {
            "LD_LIBRARY_PATH": self.ld_library_path,
            "ADSP_LIBRARY_PATH": self.adsp_library_path,
            "PATH": f"{self.path_prefix}:/usr/sbin:/usr/bin:/sbin:/bin",
        }


def run_env(board: Board, runtime: str, qairt: str) -> RunEnv:
    """LD_LIBRARY_PATH/ADSP_LIBRARY_PATH for ``runtime`` with QAIRT ``qairt`` on ``board``.

    The model's own QAIRT comes first so its host libs and the matching skel are used, never
    the system qairt-sdk 2.47 in /usr/lib (stub/skel mismatch).
    """
    host = qairt_host_lib_dir(board, qairt)
    if runtime == "litert_lm":
        ld = f"{litert_dir()}/lib:{host}:/usr/lib"
        path = f"{litert_dir()}/bin"
    else:
        ld = f"{host}:/usr/lib"
        path = qairt_bin_dir(qairt)
    return RunEnv(ld_library_path=ld, adsp_library_path=qairt_skel_dir(board, qairt), path_prefix=path)


def qairt_files(board: Board, version: str, with_genie: bool) -> list[str]:
    """Files a QAIRT install for ``board`` must contain (checked by fleet verify)."""
    host = qairt_host_lib_dir(board, version)
    arch = board.hexagon_arch.upper()
    files = [
        f"{host}/libQnnHtp.so",
        f"{host}/libQnnSystem.so",
        f"{host}/libQnnHtp{arch}Stub.so",
        f"{host}/libQnnHtpPrepare.so",
        f"{qairt_skel_dir(board, version)}/libQnnHtp{arch}Skel.so",
    ]
    if with_genie:
        files += [f"{host}/libGenie.so", f"{qairt_bin_dir(version)}/genie-t2t-run"]
    return files


# The C API library the on-board service binds (edge-llm-serve LITERT_LM_LIBRARY): LiteRT-LM's
# cc_binary //python/litert_lm:litert-lm (linkshared, python/litert_lm/BUILD:26-50 at cbf463d),
# shipped by `provisioner litert build` under the name Google's Python package loads it by
# (python/litert_lm/_ffi.py:104) and PyPI litert-lm-api ships it as.
LITERT_CAPI_LIB = "lib/liblitert-lm.so"
LITERT_FILES = ("bin/litert_lm_main", "lib/libLiteRtDispatch_Qualcomm.so", "lib/libLiteRt.so",
                "lib/libGemmaModelConstraintProvider.so", LITERT_CAPI_LIB)


def board_facts(board: Board) -> dict[str, Any]:
    """The per-board facts the fleet checks, as plain data (for group_vars and the simulator)."""
    return {
        "soc0_machine": board.soc0_machine,
        "soc_id": board.soc_id,
        "dt_compatible": list(board.dt_compatible),
        "hexagon_arch": board.hexagon_arch,
        "qnn_soc_model": board.qnn_soc_model,
        "qairt_skel_dir": board.qairt_skel_dir,
        "qairt_host_lib_dir": board.qairt_host_lib_dir,
    }
