"""The Ansible inventory contract: the ``edge_llm_*`` variables, read and written in one place.

Three stages meet in an inventory: the factory station writes one for the boards that passed,
``provisioner fleet inventory`` writes one from station records, and the rehearsal and the
simulator write one for virtual boards. The playbooks and the fleet verdict read it. So:

- :class:`HostVars` / :class:`ModelVars` are the ONE typed model of the variables of a host (what
  the verify role hands to the controller-side verdict);
- :func:`group_name` is the ONE rule for the group of a board type (the group_vars file name);
- :func:`model_thresholds` is the ONE decode/TTFT floor rule (manifest verify section on the
  catalog's reference figures);
- :func:`host_vars`, :func:`build_inventory`, :func:`dump_inventory` and :func:`write_inventory`
  are the ONLY writer: every inventory carries the same keys (the expected release is always
  ``edge_llm_expected_build_id``; no other spelling is written or read).
"""

from __future__ import annotations

import dataclasses
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from provisioner import catalog
from provisioner.contracts import download_mode
from provisioner.errors import UserError

SMOKE_PROMPT = "Explain in two sentences what an NPU is."
SMOKE_MAX_TOKENS = 128
DEFAULT_TOLERANCE = 0.8
DEFAULT_SERVE_USER = "llm"
DEFAULT_HOSTNAME_RULE = "{board}-{serial}"
#: how far a board may fall below its own factory baseline before `fleet verify` fails it (0.10 = 10 %)
DEFAULT_BASELINE_MAX_DROP = 0.10
_HOSTNAME_FIELDS = ("board", "serial")
_HOSTNAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")   # one DNS label (RFC 1123)

# Every edge_llm_* variable this product writes or reads, and what it means.
VARIABLES: dict[str, str] = {
    "edge_llm_board": "catalog id of the board type (group_vars of the board group set it)",
    "edge_llm_board_facts": "catalog facts of the board type (generated group_vars)",
    "edge_llm_models": "models the board must serve (list of ModelVars mappings)",
    "edge_llm_expected_build_id": "release id the board's os-release BUILD_ID must equal",
    "edge_llm_download_mode": "qcom_scm download_mode policy (0 or off: production, 1 or full: debug, 'any')",
    "edge_llm_serial": "board serial number (station records)",
    "edge_llm_slot": "station slot the board was flashed in",
    "edge_llm_serve_user": "user the on-board inference service runs as",
    "edge_llm_serve_port_base": "port of the board's first model service (model i listens on base + i)",
    "edge_llm_verify_prompt": "smoke inference prompt",
    "edge_llm_verify_max_tokens": "smoke inference output length",
    "edge_llm_verify_smoke": "run the smoke inference",
    "edge_llm_verify_rehash": "ignore the board's sha256 cache",
    "edge_llm_host_keys": "SHA-256 fingerprints of the SSH host keys the station recorded on the line",
    "edge_llm_factory_baseline": "the board's smoke inference at the factory (decode_tok_s, ttft_s, model, "
                                 "max_drop)",
}


def group_name(board_id: str) -> str:
    """Ansible group of a board type: the catalog id with dashes as underscores (``iq_8275_evk``).

    Any spelling the catalog accepts is canonicalised first, so ``IQ-8275`` lands in the same
    group as ``iq-8275-evk`` (an unknown board is a one-line :class:`UserError`).
    """
    return catalog.board(board_id).id.replace("-", "_")


def hostname_for(rule: str | None, board_id: str, serial: str) -> str:
    """The fleet host name of a board by the release's rule (``{board}`` = the board id without
    ``-evk``, ``{serial}`` = the serial in lower case); a rule that gives no valid host name is a
    :class:`UserError`."""
    rule = rule or DEFAULT_HOSTNAME_RULE
    check_hostname_rule(rule)
    return rule.format(board=board_id.removesuffix("-evk"), serial=serial.lower()).lower()


def check_hostname_rule(rule: str) -> None:
    """Refuse a rule that names another field, lacks ``{serial}`` or cannot give a DNS label."""
    names = re.findall(r"{([^{}]*)}", rule)
    bad = [n for n in names if n not in _HOSTNAME_FIELDS]
    if bad or "serial" not in names:
        raise UserError(f"hostname rule {rule!r} must use {{serial}} and only {{board}} and {{serial}}",
                        f"e.g. {DEFAULT_HOSTNAME_RULE!r}")
    sample = rule.format(board="iq-8275", serial="0aa94efd").lower()
    if not _HOSTNAME_RE.match(sample):
        raise UserError(f"hostname rule {rule!r} gives {sample!r}, which is not a host name",
                        "use letters, digits and dashes (at most 63), e.g. '{board}-{serial}'")


def model_thresholds(board: catalog.Board, model_id: str, *, os_name: str = "qli",
                     tolerance: float = DEFAULT_TOLERANCE, min_decode_tok_s: float | None = None,
                     max_ttft_s: float | None = None) -> tuple[float | None, float | None]:
    """(min decode tok/s, max TTFT s) for ``model_id`` on ``board``.

    An explicit threshold wins; otherwise the floor is the catalog's reference decode speed times
    ``tolerance`` and the TTFT ceiling five times the reference TTFT (at least 0.5 s), because a
    first token is dominated by prompt length and warm-up, which vary more than decode speed.
    """
    ref = board.expected(model_id, os_name)
    min_dec = min_decode_tok_s
    if min_dec is None and ref is not None:
        min_dec = round(ref.decode_tok_s * tolerance, 2)
    max_ttft = max_ttft_s
    if max_ttft is None and ref is not None and ref.ttft_s is not None:
        max_ttft = round(max(ref.ttft_s * 5, 0.5), 3)
    return min_dec, max_ttft


def _download_mode_policy(value: Any) -> int | None:
    """``edge_llm_download_mode`` as a qcom_scm mode number (None: any mode passes).

    Written either way a kernel prints it (``1`` or ``full``, see
    :mod:`provisioner.contracts.download_mode`); YAML 1.1 turns a bare ``off``/``on`` into a bool.
    """
    if value in (None, "", "any"):
        return None
    if isinstance(value, bool):
        return int(value)
    mode = download_mode.mode(str(value))
    if mode is None:
        raise ValueError(f"edge_llm_download_mode {value!r} is not a qcom_scm download_mode: use 0/off, 1/full, "
                         "2/mini, 3/'full,mini' or 'any'")
    return mode


def _bool(value: Any) -> bool:
    """Ansible-style truthiness for values that may arrive as strings ("false", "no", "0")."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on", "y")
    return bool(value)


@dataclass(frozen=True)
class ModelVars:
    """One entry of ``edge_llm_models``: a model the board must serve, with its pins and floors."""

    name: str
    kind: str
    runtime: str
    qairt: str
    chat_template: str = "plain"
    file: str | None = None
    size: int | None = None
    sha256: str | None = None
    version: str | None = None
    min_decode_tok_s: float | None = None
    max_ttft_s: float | None = None
    port: int | None = None
    system_prompt: str | None = None
    tool_format: str | None = None     # a Genie model's tool-call format (else the catalog's for its name)

    @classmethod
    def from_vars(cls, data: Mapping[str, Any]) -> ModelVars:
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in data.items() if k in names and v is not None}
        if "runtime" not in kw:
            kw["runtime"] = "litert_lm" if kw.get("kind") == "litertlm" else "genie"
        kw["qairt"] = catalog.normalize_qairt(str(kw.get("qairt", "")))
        return cls(**kw)


def not_set(name: str) -> str:
    """The one-line error for a host that lacks ``name``: most often a host outside every board group."""
    groups = ", ".join(group_name(b) for b in catalog.boards())
    return (f"{name} is not set for this host: put it in its board group ({groups}: playbooks/group_vars) "
            f"or set {name} in host_vars")


@dataclass(frozen=True)
class FactoryBaseline:
    """A board's own smoke inference at the factory (``edge_llm_factory_baseline``), and how far below
    it the board may fall (the release's ``verify.baseline_max_drop``)."""

    model: str
    decode_tok_s: float
    ttft_s: float | None = None
    max_drop: float = DEFAULT_BASELINE_MAX_DROP

    @classmethod
    def from_vars(cls, raw: Any) -> FactoryBaseline | None:   # noqa: ANN401 - an inventory value
        """None unless ``raw`` is a mapping with a model name and a positive decode speed."""
        if not isinstance(raw, Mapping):
            return None
        dec, ttft, drop = raw.get("decode_tok_s"), raw.get("ttft_s"), raw.get("max_drop")
        if not raw.get("model") or isinstance(dec, bool) or not isinstance(dec, int | float) or dec <= 0:
            return None
        return cls(model=str(raw["model"]), decode_tok_s=float(dec),
                   ttft_s=float(ttft) if isinstance(ttft, int | float) and not isinstance(ttft, bool) else None,
                   max_drop=float(drop) if isinstance(drop, int | float) and 0 < drop < 1 else
                   DEFAULT_BASELINE_MAX_DROP)

    def as_vars(self) -> dict[str, Any]:
        return {"model": self.model, "decode_tok_s": self.decode_tok_s, "ttft_s": self.ttft_s,
                "max_drop": self.max_drop}


#: the variables :meth:`HostVars.from_vars` reads, so a caller holding all of a host's variables (an
#: action plugin's task_vars) can hand over just these
HOST_VARS_READ = ("edge_llm_board", "edge_llm_board_facts", "edge_llm_models", "edge_llm_expected_build_id",
                  "edge_llm_download_mode", "edge_llm_verify_prompt", "edge_llm_verify_max_tokens",
                  "edge_llm_verify_smoke", "edge_llm_verify_rehash", "edge_llm_serve_user",
                  "edge_llm_factory_baseline")


@dataclass(frozen=True)
class HostVars:
    """What one board should look like: its type, release and models (its ``edge_llm_*`` variables)."""

    board: catalog.Board
    models: tuple[ModelVars, ...] = ()
    build_id: str | None = None
    download_mode: int | None = 0
    prompt: str = SMOKE_PROMPT
    max_tokens: int = SMOKE_MAX_TOKENS
    smoke: bool = True
    rehash: bool = False
    serve_user: str = DEFAULT_SERVE_USER
    factory_baseline: FactoryBaseline | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_vars(cls, hv: Mapping[str, Any]) -> HostVars:
        """Build from the ``edge_llm_*`` variables of one host (group_vars + host overrides); reads only
        :data:`HOST_VARS_READ`."""
        board_id = hv.get("edge_llm_board")
        if not board_id:
            raise ValueError(not_set("edge_llm_board"))
        board = catalog.board(str(board_id))
        facts = hv.get("edge_llm_board_facts") or {}
        overrides = {k: (tuple(v) if isinstance(v, list) else v) for k, v in facts.items()
                     if k in {f.name for f in dataclasses.fields(catalog.Board)}}
        if overrides:
            board = dataclasses.replace(board, **overrides)
        dm = _download_mode_policy(hv.get("edge_llm_download_mode", 0))
        return cls(
            board=board,
            models=tuple(ModelVars.from_vars(m) for m in hv.get("edge_llm_models") or []),
            build_id=hv.get("edge_llm_expected_build_id") or None,
            download_mode=dm,
            prompt=hv.get("edge_llm_verify_prompt") or SMOKE_PROMPT,
            max_tokens=int(hv.get("edge_llm_verify_max_tokens") or SMOKE_MAX_TOKENS),
            smoke=_bool(hv.get("edge_llm_verify_smoke", True)),
            rehash=_bool(hv.get("edge_llm_verify_rehash", False)),
            serve_user=hv.get("edge_llm_serve_user") or DEFAULT_SERVE_USER,
            factory_baseline=FactoryBaseline.from_vars(hv.get("edge_llm_factory_baseline")),
        )


# ---------------------------------------------------------------------------------------------
# The writer (station records, fleet inventory, simulator, rehearsal)
# ---------------------------------------------------------------------------------------------


def host_vars(*, board: str, address: str | None = None, port: int | None = None, user: str | None = None,
              serial: str | None = None, build_id: str | None = None, slot: str | None = None,
              connection: Mapping[str, Any] | None = None, **edge_llm: Any) -> dict[str, Any]:
    """The variables of one host, with the keys every inventory of this product uses.

    ``connection`` holds further ``ansible_*`` connection variables (key file, ssh args, python);
    ``edge_llm`` further variables by their name without the ``edge_llm_`` prefix, refused unless
    :data:`VARIABLES` lists them, so a writer cannot invent a key no reader knows.
    """
    hv: dict[str, Any] = {}
    if address:
        hv["ansible_host"] = str(address)
    if port:
        hv["ansible_port"] = int(port)
    if user:
        hv["ansible_user"] = str(user)
    for key, value in (connection or {}).items():
        if not key.startswith("ansible_"):
            raise ValueError(f"connection variable {key!r} is not an ansible_* variable")
        hv[key] = value
    hv["edge_llm_board"] = catalog.board(board).id
    if serial:
        hv["edge_llm_serial"] = str(serial)
    if build_id:
        hv["edge_llm_expected_build_id"] = str(build_id)
    if slot:
        hv["edge_llm_slot"] = str(slot)
    hv.update(_edge_llm_vars(edge_llm))
    return hv


def _edge_llm_vars(values: Mapping[str, Any]) -> dict[str, Any]:
    out = {}
    for short, value in values.items():
        key = f"edge_llm_{short}"
        if key not in VARIABLES:
            raise ValueError(f"{key} is not an inventory variable of this product (known: {', '.join(VARIABLES)})")
        if value is not None:
            out[key] = value
    return out


# release.json model fields an ``edge_llm_models`` entry carries (the release writes them for this)
RELEASE_MODEL_FIELDS = ("name", "kind", "runtime", "qairt", "chat_template", "file", "size", "sha256",
                        "min_decode_tok_s", "max_ttft_s")


def models_from_release(models: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``edge_llm_models`` for the models of a release.json: its pins, sizes and verify floors, as written."""
    return [{k: m[k] for k in RELEASE_MODEL_FIELDS if m.get(k) is not None} for m in models]


def group_vars(**edge_llm: Any) -> dict[str, Any]:
    """Group-level ``edge_llm_*`` variables (same names and check as :func:`host_vars`)."""
    return _edge_llm_vars(edge_llm)


def build_inventory(hosts: Iterable[tuple[str, Mapping[str, Any]]], *,
                    group_vars_by_group: Mapping[str, Mapping[str, Any]] | None = None,
                    all_vars: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """An Ansible YAML inventory: ``(name, host_vars)`` pairs grouped by board type (:func:`group_name`).

    The groups are the board types so the playbooks' generated ``group_vars/<group>.yml`` apply.
    """
    groups: dict[str, dict[str, Any]] = {}
    for name, hv in hosts:
        groups.setdefault(group_name(str(hv["edge_llm_board"])), {"hosts": {}})["hosts"][str(name)] = dict(hv)
    for grp, gv in (group_vars_by_group or {}).items():
        if grp in groups and gv:
            groups[grp]["vars"] = dict(gv)
    inv: dict[str, Any] = {"all": {"children": {g: groups[g] for g in sorted(groups)}}}
    if all_vars:
        inv["all"]["vars"] = dict(all_vars)
    return inv


def dump_inventory(inv: Mapping[str, Any], header: str = "") -> str:
    """YAML text of an inventory (``header`` lines are written as comments after ``---``)."""
    comment = "".join(f"# {line}\n" for line in header.splitlines())
    return "---\n" + comment + yaml.safe_dump(dict(inv), sort_keys=False, default_flow_style=False)


def write_inventory(path: Path | str, inv: Mapping[str, Any], header: str = "") -> Path:
    """Write an inventory atomically (a reader never sees half a file); returns the path."""
    out = Path(path)
    atomic_write(out, dump_inventory(inv, header))
    return out


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
