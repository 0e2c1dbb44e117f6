"""``fleet verify``: the probe spec the board answers, and the verdict on its answers.

The board side is a dumb gatherer (the edge_llm.fleet collection's ``verify`` module): it reads the
files, stats the paths, asks systemctl and runs the smoke inference named in the spec
(:func:`probe_spec`), and returns raw JSON in ONE module call. Everything that knows about boards - the
on-board paths (:mod:`provisioner.contracts.board`), what to look at - is built here on the controller, and here
the answers become checks, figures and ok/not ok (:func:`evaluate`). That keeps a 50-board verify at one
SSH round trip per board and keeps the rules testable without a board.

A *check* here is one judged item of a board's verify report (identity, release, fastrpc, memlock,
QAIRT, model files, smoke inference); the report's ``checks`` list holds them. Each failed check
names its cause in :mod:`provisioner.fleet.shared.diagnosis`. ``fleet benchmark``, the deploy gate
and the update-os gate judge with the same checks.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from provisioner import catalog
from provisioner.contracts import board as on_board
from provisioner.contracts import download_mode, memlock
from provisioner.contracts.inventory import FactoryBaseline, HostVars, ModelVars
from provisioner.fleet.shared.diagnosis import DIAGNOSES, diagnose_log
from provisioner.fleet.shared.onboard import serve
from provisioner.fleet.shared.serve_config import smoke_run

DT_BASE = "/sys/firmware/devicetree/base"    # /proc/device-tree is a symlink to it on DT kernels
LIMITS_CONF = "/etc/security/limits.conf"
LIMITS_D = "/etc/security/limits.d"
RLIM_INFINITY_TEXT = "infinity"


@dataclass
class Check:
    """One judged item of the report; a failed one names its diagnosis key."""

    name: str
    ok: bool
    detail: str = ""
    diagnosis: str | None = None       # key into DIAGNOSES

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"check": self.name, "ok": self.ok, "detail": self.detail}
        if not self.ok and self.diagnosis:
            diag = DIAGNOSES[self.diagnosis]
            d.update(diagnosis=self.diagnosis, cause=diag.cause, remedy=diag.remedy, source=diag.source)
        return d


def _os_release(text: str | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in (text or "").splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip().strip('"').strip("'")
    return out


def _read(probe: dict[str, Any], key: str) -> str | None:
    item = (probe.get("read") or {}).get(key)
    if isinstance(item, dict):
        return item.get("content")
    return item


def _mode(stat: dict[str, Any]) -> int:
    try:
        return int(str(stat.get("mode", "0")), 8)
    except ValueError:
        return 0


def _memlock_ok(value: Any) -> bool:
    if value is None:
        return False
    text = str(value).strip().lower()
    if text in (RLIM_INFINITY_TEXT, "unlimited", "-1", "18446744073709551615"):
        return True
    try:
        return int(text) >= memlock.MIN_BYTES    # FastRPC pins ~1.17 GB; below, the model fails to load
    except ValueError:
        return False


def _human_memlock(value: Any) -> str:
    try:
        n = int(value)
    except (TypeError, ValueError):
        return str(value)
    if n >= 1024**2:
        return f"{n // 1024**2} MiB"
    return f"{n // 1024} KiB" if n >= 1024 else f"{n} B"


def identity_checks(expect: HostVars, probe: dict[str, Any]) -> list[Check]:
    b = expect.board
    machine = (_read(probe, "soc0_machine") or "").strip()
    soc_id_text = (_read(probe, "soc_id") or "").strip()
    compat = [c for c in (_read(probe, "dt_compatible") or "").replace("\x00", "\n").splitlines() if c]
    problems = []
    if machine != b.soc0_machine:
        problems.append(f"soc0 machine {machine or '(missing)'} != {b.soc0_machine}")
    if soc_id_text != str(b.soc_id):
        problems.append(f"soc_id {soc_id_text or '(missing)'} != {b.soc_id}")
    if not set(compat) & set(b.dt_compatible):
        problems.append(f"DT compatible {compat or '(missing)'} has none of {list(b.dt_compatible)}")
    if not problems:
        return [Check("identity", True, f"{machine} soc_id {soc_id_text} ({b.id})")]
    actual = [o.id for o in catalog.boards().values() if o.id != b.id and (o.soc0_machine == machine
                                                                           or str(o.soc_id) == soc_id_text)]
    detail = "; ".join(problems)
    if actual:
        detail += f" - this is an {actual[0]}, inventory says {b.id}"
    return [Check("identity", False, detail, "wrong-board")]


def evaluate(expect: HostVars, probe: dict[str, Any], *, smoke_only: bool = False) -> dict[str, Any]:
    """Turn the raw probe into checks, figures and a verdict (the per-board report row)."""
    b = expect.board
    checks: list[Check] = []
    figures: dict[str, dict[str, Any]] = {}
    osr = _os_release(_read(probe, "os_release"))
    build_id = osr.get("BUILD_ID")
    if not smoke_only:
        checks += identity_checks(expect, probe)
        if expect.build_id:
            checks.append(Check("release", build_id == expect.build_id,
                                f"BUILD_ID {build_id or '(missing)'}" + ("" if build_id == expect.build_id
                                                                         else f" != {expect.build_id}"), "release"))
        else:
            checks.append(Check("release", bool(build_id), f"BUILD_ID {build_id or '(missing)'}", "release"))
        checks += _fastrpc_checks(probe, expect.serve_user)
        checks += _limits_checks(expect, probe)
        checks += _download_mode_check(expect, probe)
    for m in expect.models:
        if not smoke_only:
            checks += _model_checks(expect, m, probe)
        run = (probe.get("runs") or {}).get(m.name)
        if run is not None:
            c, fig = smoke_check(m, run, expect.prompt)
            checks.append(c)
            figures[m.name] = fig
            checks += baseline_check(m, fig, expect.factory_baseline)
    failed = [c for c in checks if not c.ok]
    return {
        "ok": not failed,
        "board": b.id,
        "release": build_id,
        "qairt": sorted({m.qairt for m in expect.models}),
        "models": figures,
        "checks": [c.as_dict() for c in checks],
        "failures": [f"{c.name}: {c.detail}" + (f" -> {DIAGNOSES[c.diagnosis].remedy}" if c.diagnosis else "")
                     for c in failed],
        "reason": "; ".join(f"{c.name}: {c.detail}" for c in failed[:3]),
    }


def _fastrpc_checks(probe: dict[str, Any], user: str) -> list[Check]:
    stats = probe.get("stat") or {}
    dev = stats.get("fastrpc_device") or {}
    lib = stats.get("fastrpc_lib") or {}
    out: list[Check] = []
    if not dev.get("exists"):
        out.append(Check("fastrpc", False, f"{on_board.FASTRPC_DEVICE} missing", "fastrpc-missing"))
    else:
        mode = _mode(dev) & 0o7777
        have = f"{dev.get('owner')}:{dev.get('group')} {mode:04o}"
        want = f"{on_board.FASTRPC_OWNER}:{on_board.FASTRPC_GROUP} {on_board.FASTRPC_MODE:04o}"
        if mode & 0o007:
            out.append(Check("fastrpc", False, f"{on_board.FASTRPC_DEVICE} is {have}: world-accessible, any local "
                                               f"user can drive the cDSP (want {want})", "fastrpc-perms"))
        elif (dev.get("owner"), dev.get("group"), mode) != (on_board.FASTRPC_OWNER, on_board.FASTRPC_GROUP,
                                                             on_board.FASTRPC_MODE):
            out.append(Check("fastrpc", False, f"{on_board.FASTRPC_DEVICE} is {have} (want {want})", "fastrpc-perms"))
        else:
            group = (probe.get("groups") or {}).get(on_board.FASTRPC_GROUP) or {}
            if not group.get("exists", True):
                out.append(Check("fastrpc", False, f"group {on_board.FASTRPC_GROUP} missing", "fastrpc-perms"))
            elif user and user != "root" and user not in (group.get("members") or []):
                out.append(Check("fastrpc", False, f"inference user '{user}' is not in group {on_board.FASTRPC_GROUP} "
                                                   f"(members: {', '.join(group.get('members') or []) or 'none'})",
                                 "fastrpc-group"))
    if not lib.get("exists"):
        out.append(Check("fastrpc", False, f"{on_board.FASTRPC_LIB} missing", "fastrpc-missing"))
    active = (probe.get("units_active") or {}).get("cdsprpcd")
    if active != "active":
        out.append(Check("fastrpc", False, f"{on_board.FASTRPC_SERVICE} is {active or 'unknown'}", "cdsprpcd"))
    if not out:
        out.append(Check("fastrpc", True, f"{on_board.FASTRPC_DEVICE} {dev.get('owner')}:{dev.get('group')} "
                                          f"{_mode(dev) & 0o7777:04o}, "
                                          f"libcdsprpc.so, cdsprpcd active"))
    return out


def _limits_checks(expect: HostVars, probe: dict[str, Any]) -> list[Check]:
    out: list[Check] = []
    shows = probe.get("units_show") or {}
    for m in expect.models:
        val = shows.get(f"memlock:{m.name}")
        ok = _memlock_ok(val)
        out.append(Check(f"memlock-service:{m.name}", ok,
                         f"LimitMEMLOCK={val if val is not None else '(unit not found)'}"
                         + ("" if ok else " (want infinity)"), "memlock"))
    root = probe.get("rlimit_memlock") or {}
    soft = root.get("soft")
    texts = [_read(probe, "limits_conf") or ""]
    texts += [t or "" for _n, t in sorted(((probe.get("read_dir") or {}).get("limits_d") or {}).items())]
    configured = pam_memlock("root", texts)
    live_ok, conf_ok = _memlock_ok(soft), _memlock_ok(configured)
    shown = "unlimited" if soft in (-1, "infinity") else _human_memlock(soft)
    conf_shown = "unlimited" if configured == "infinity" else _human_memlock(configured)
    if live_ok:
        out.append(Check("memlock-root", True, f"root ulimit -l {shown}"))
    elif conf_ok:
        out.append(Check("memlock-root", True, f"limits.d gives root {conf_shown} at login "
                                               f"(this session: {shown})"))
    else:
        out.append(Check("memlock-root", False, f"root ulimit -l {shown}, limits.d gives {conf_shown} "
                                                "(want unlimited)", "memlock"))
    return out


def pam_memlock(user: str, texts: list[str], default_kib: int = 8192) -> str | int:
    """Soft memlock (bytes or "infinity") pam_limits gives ``user`` from limits.conf + limits.d texts.

    pam_limits rules: the user's own line beats ``@group`` beats ``*``; wildcard and group lines
    never apply to root, which is why a limits.d file must name root explicitly (QLI default 8 MB).
    """
    best: dict[str, tuple[int, Any]] = {}
    for text in texts:
        for line in text.splitlines():
            parts = line.split("#", 1)[0].split()
            if len(parts) != 4 or parts[2].lower() != "memlock":
                continue
            domain, kind, _item, val = parts
            if domain == user:
                prio = 0
            elif domain == "*" and user != "root":
                prio = 2
            else:
                continue
            v: Any = "infinity" if val.lower() in ("unlimited", "infinity", "-1") else None
            if v is None:
                try:
                    v = int(val) * 1024
                except ValueError:
                    continue
            for k in (("soft", "hard") if kind == "-" else (kind,)):
                if k in ("soft", "hard") and (k not in best or prio <= best[k][0]):
                    best[k] = (prio, v)
    if "soft" in best:
        return best["soft"][1]
    return best["hard"][1] if "hard" in best else default_kib * 1024


def _download_mode_check(expect: HostVars, probe: dict[str, Any]) -> list[Check]:
    """The board's qcom_scm download_mode against the policy, compared as mode numbers: kernels spell
    the same mode ``0``/``off`` or ``1``/``full`` (see :mod:`provisioner.contracts.download_mode`)."""
    raw = _read(probe, "download_mode")
    shown = raw.strip() if raw is not None else None
    if expect.download_mode is None:
        return [Check("download-mode", True, f"download_mode={shown} (no policy)")]
    if shown is None:
        return [Check("download-mode", False, f"{on_board.DOWNLOAD_MODE_PARAM} not readable", "download-mode")]
    value = download_mode.mode(shown)
    policy = download_mode.describe(expect.download_mode)
    if value is None:
        return [Check("download-mode", False, f"download_mode={shown!r}: not a mode qcom_scm prints (policy {policy})",
                      "download-mode")]
    ok = value == expect.download_mode
    detail = f"download_mode={shown}" + ("" if shown == str(value) else f" = {value}")
    return [Check("download-mode", ok, detail + ("" if ok else f" (policy {policy})"), "download-mode")]


def _model_checks(expect: HostVars, m: ModelVars, probe: dict[str, Any]) -> list[Check]:
    b = expect.board
    out: list[Check] = []
    missing = (probe.get("exists") or {}).get(f"qairt:{m.name}") or []
    info = (probe.get("models") or {}).get(m.name) or {}
    meta = info.get("meta") or {}
    q = (probe.get("qairt") or {}).get(m.name) or {}
    on_board_qairt = catalog.normalize_qairt(str(meta.get("qairt"))) if meta.get("qairt") else None
    wrong_libs = {os.path.basename(p): v for p, v in (q.get("lib_builds") or {}).items() if v and v != m.qairt}
    if on_board.qairt_dir(m.qairt) in missing:
        others = ", ".join(q.get("installed") or []) or "none"
        out.append(Check(f"qairt:{m.name}", False, f"QAIRT {m.qairt} not installed (found: {others})",
                         "qairt-missing"))
    elif missing:
        out.append(Check(f"qairt:{m.name}", False, f"QAIRT {m.qairt} incomplete: missing {', '.join(missing[:3])}",
                         "qairt-missing"))
    elif wrong_libs:
        lib, ver = next(iter(wrong_libs.items()))
        out.append(Check(f"qairt:{m.name}", False, f"{on_board.qairt_dir(m.qairt)}: {lib} is from QAIRT {ver}, "
                                                   f"the model needs {m.qairt}", "qairt-mismatch"))
    elif q.get("marker") and catalog.normalize_qairt(q["marker"]) != m.qairt:
        out.append(Check(f"qairt:{m.name}", False, f"{on_board.qairt_dir(m.qairt)} holds QAIRT {q['marker']}",
                         "qairt-mismatch"))
    elif on_board_qairt and on_board_qairt != m.qairt:
        out.append(Check(f"qairt:{m.name}", False, f"model on board was built for QAIRT {on_board_qairt}, "
                                                   f"the fleet pins {m.qairt}", "qairt-mismatch"))
    else:
        out.append(Check(f"qairt:{m.name}", True, f"QAIRT {m.qairt} (host libs + {b.qairt_skel_dir})"))
    rmissing = (probe.get("exists") or {}).get(f"runtime:{m.name}") or []
    if rmissing:
        out.append(Check(f"runtime:{m.name}", False, f"missing {', '.join(rmissing[:2])}", "runtime-missing"))
    out += _model_file_checks(m, info)
    if m.runtime == "genie":
        out.append(_genie_config_check(b, m, info))
    return out


def _model_file_checks(m: ModelVars, info: dict[str, Any]) -> list[Check]:
    name = f"model:{m.name}"
    if not info or not info.get("exists"):
        return [Check(name, False, f"{on_board.model_current(m.name)} missing", "model-missing")]
    meta = info.get("meta") or {}
    files = info.get("files") or {}
    if not files:
        return [Check(name, False, f"no files in {info.get('resolved')}", "model-missing")]
    problems = []
    if m.runtime == "litert_lm":
        main = m.file or meta.get("file") or next((f for f in files if f.endswith(".litertlm")), None)
        if main not in files:
            return [Check(name, False, f"{main} missing in {info.get('resolved')}", "model-missing")]
        want_size = m.size or meta.get("size")
        want_sha = m.sha256 or meta.get("sha256")
        got = files[main]
        if want_size and got.get("size") != int(want_size):
            problems.append(f"{main} is {got.get('size')} bytes, expected {want_size}")
        elif want_sha and got.get("sha256") and got["sha256"] != want_sha:
            problems.append(f"{main} sha256 {got['sha256'][:12]}... != {want_sha[:12]}...")
    else:
        listed = [e if isinstance(e, dict) else {"name": e} for e in meta.get("files") or []]
        for entry in listed:
            fname = entry.get("name") or entry.get("path")
            got = files.get(fname)
            if got is None:
                problems.append(f"{fname} missing")
            elif entry.get("size") is not None and got.get("size") != int(entry["size"]):
                problems.append(f"{fname} is {got.get('size')} bytes, expected {entry['size']}")
            elif entry.get("sha256") and got.get("sha256") and got["sha256"] != entry["sha256"]:
                problems.append(f"{fname} sha256 mismatch")
        total = sum(int(files[e.get("name")].get("size") or 0) for e in listed if e.get("name") in files)
        want_total = m.size or meta.get("size")
        if not problems and listed and want_total and total != int(want_total):
            problems.append(f"bundle is {total} bytes, expected {want_total}")
        if m.sha256 and meta.get("sha256") and meta["sha256"] != m.sha256:
            problems.append(f"bundle {meta['sha256'][:12]}... is not the pinned {m.sha256[:12]}...")
    if problems:
        return [Check(name, False, "; ".join(problems[:3]), "truncated-model")]
    version = info.get("version")
    if m.version and version and version != m.version:
        return [Check(name, False, f"current is version {version}, expected {m.version}", "model-missing")]
    total = sum(int(f.get("size") or 0) for f in files.values())
    return [Check(name, True, f"{version or '?'}: {len(files)} file(s), {total} bytes, sha256 ok")]


def _genie_config_check(b: catalog.Board, m: ModelVars, info: dict[str, Any]) -> Check:
    name = f"genie-config:{m.name}"
    cfg = (info.get("json") or {}).get("htp_backend_ext_config.json")
    if not isinstance(cfg, dict):
        return Check(name, False, "htp_backend_ext_config.json missing or unreadable: bundle is unsafe", "soc-model")
    devices = cfg.get("devices") or [{}]
    dev = devices[0] if isinstance(devices[0], dict) else {}
    soc_model, arch = dev.get("soc_model"), dev.get("dsp_arch")
    if soc_model != b.qnn_soc_model or str(arch).lower() != b.hexagon_arch:
        return Check(name, False, f"soc_model {soc_model}/dsp_arch {arch}, board needs {b.qnn_soc_model}/"
                                  f"{b.hexagon_arch}", "soc-model")
    return Check(name, True, f"soc_model {soc_model}, dsp_arch {arch}")


def below_floor(m: ModelVars, decode_tok_s: float) -> bool:
    """The board type's decode floor (the model's ``min_decode_tok_s``, from the catalog's measured figure
    less the tolerance): one rule for the runtime smoke and the smoke through the serving API."""
    return m.min_decode_tok_s is not None and decode_tok_s < m.min_decode_tok_s


def api_checks(expect: HostVars, api: dict[str, dict[str, Any]]) -> list[Check]:
    """Judge streamed chat completions through edge-llm-serve (edge_llm.fleet.api bench figures per model):
    each served model answered, and decoded at the board type's speed.

    The rate judged is the lower of what the client timed between streamed chunks and what the service
    reported from the runtime (``timing.decode_tok_s`` of the last chunk): on a board both agree within the
    network's jitter, and a service that buffers or a runtime that falls back off the NPU shows in one of them."""
    out: list[Check] = []
    for m in expect.models:
        fig = api.get(m.name)
        if fig is None:
            continue                    # not served on this board
        name = f"api:{m.name}"
        where = fig.get("endpoint") or "the serving API"
        if fig.get("failed") or not fig.get("n"):
            why = (fig.get("errors") or ["no answer"])[0]
            out.append(Check(name, False, f"{where}: streamed chat completion failed ({why})", "smoke-failed"))
            continue
        rates = [float(r) for r in (fig.get("median_decode_tok_s"), fig.get("median_runtime_decode_tok_s"))
                 if r is not None]
        dec, ttft = (min(rates) if rates else None), fig.get("median_ttft_s")
        if dec is None:
            out.append(Check(name, False, f"{where}: no decode rate (fewer than two streamed tokens)",
                             "smoke-failed"))
        elif below_floor(m, float(dec)):
            out.append(Check(name, False, f"decode {dec} tok/s through {where} < {m.min_decode_tok_s}", "slow"))
        else:
            out.append(Check(name, True, f"decode {dec} tok/s, TTFT {ttft} s through {where}"))
    return out


def smoke_check(m: ModelVars, run: dict[str, Any], prompt: str | None = None) -> tuple[Check, dict[str, Any]]:
    """Judge one smoke inference: exit status, figures vs floors, coherent text, log signatures.

    ``prompt`` is the smoke prompt: litert_lm_main prints it before the answer, and only the answer
    may be judged for coherence (a good prompt must not pass an empty or broken answer).
    """
    name = f"smoke:{m.name}"
    stdout = run.get("stdout") or ""
    log = stdout + "\n" + (run.get("stderr") or "")
    profile = (run.get("collected") or {}).get("{work}/profile.json")
    parsed = serve.parse_run(m.runtime, stdout, profile, prompt)
    fig = {k: parsed.get(k) for k in ("decode_tok_s", "ttft_s", "prefill_tok_s", "decode_tokens", "init_s")}
    fig["min_decode_tok_s"] = m.min_decode_tok_s
    fig["max_ttft_s"] = m.max_ttft_s
    fig["text"] = (parsed.get("text") or "")[:200]
    if run.get("error"):
        return Check(name, False, str(run["error"]), "smoke-failed"), fig
    if run.get("rc") != 0:
        key = diagnose_log(log, m.runtime) or "smoke-failed"
        last = [ln for ln in log.strip().splitlines() if ln.strip()][-1:] or ["(no output)"]
        return Check(name, False, f"exit {run.get('rc')}: {last[0][:160]}", key), fig
    if not parsed.get("has_benchmark") or parsed.get("decode_tok_s") is None:
        key = diagnose_log(log, m.runtime) or "smoke-failed"
        return Check(name, False, "no timing figures in the output (BenchmarkInfo / profile missing)", key), fig
    ok_text, why = serve.coherence(parsed.get("text") or "")
    if not ok_text:
        return Check(name, False, f"incoherent output ({why}): {fig['text'][:60]!r}", "garbage"), fig
    dec, ttft = parsed["decode_tok_s"], parsed.get("ttft_s")
    if below_floor(m, dec):
        key = "no-burst" if (m.runtime == "litert_lm" and ("Null Qualcomm options" in log or
                                                           "HtpPerformanceMode: 2" not in log
                                                           and "Set HTP performance mode: 2" not in log)) else "slow"
        return Check(name, False, f"decode {dec} tok/s < {m.min_decode_tok_s}", key), fig
    if m.max_ttft_s is not None and ttft is not None and ttft > m.max_ttft_s:
        return Check(name, False, f"TTFT {ttft} s > {m.max_ttft_s} s", "ttft"), fig
    return Check(name, True, f"decode {dec} tok/s, TTFT {ttft} s, coherent"), fig


def baseline_check(m: ModelVars, fig: dict[str, Any], base: FactoryBaseline | None) -> list[Check]:
    """This board now against its own smoke inference at the factory, e.g. "32.1 tok/s at the factory,
    27.4 now: -15%"; fails when the drop is larger than the release allows. Nothing to say without a
    baseline for this model or without a decode figure now (the smoke check already failed then)."""
    now = fig.get("decode_tok_s")
    if base is None or base.model != m.name or not isinstance(now, int | float):
        return []
    change = (now - base.decode_tok_s) / base.decode_tok_s
    detail = f"{base.decode_tok_s:.1f} tok/s at the factory, {now:.1f} now: {change:+.0%}"
    if -change > base.max_drop:
        return [Check(f"baseline:{m.name}", False, f"{detail} (at most -{base.max_drop:.0%} allowed)",
                      "slower-than-factory")]
    return [Check(f"baseline:{m.name}", True, detail)]


def probe_spec(expect: HostVars, *, only_model: str | None = None, smoke_only: bool = False,
               model_dir_override: dict[str, str] | None = None, repeat: int = 1) -> dict[str, Any]:
    """Everything the board-side gatherer must read/stat/run for ``expect``, as plain JSON; each smoke run
    ``repeat`` times (a benchmark takes medians of them)."""
    b = expect.board
    overrides = model_dir_override or {}
    models = [m for m in expect.models if only_model in (None, m.name)]
    spec: dict[str, Any] = {"read": {}, "stat": {}, "exists": {}, "units_active": {}, "units_show": {},
                            "rlimit_memlock": True, "models": {}, "runs": {}, "qairt": {},
                            "rehash": expect.rehash}
    if not smoke_only:
        spec["read"] = {
            "soc0_machine": on_board.SOC0_MACHINE, "soc_id": on_board.SOC0_SOC_ID,
            "dt_compatible": [on_board.DT_COMPATIBLE, DT_BASE + "/compatible"],
            "dt_model": [on_board.DT_MODEL, DT_BASE + "/model"], "os_release": on_board.OS_RELEASE,
            "download_mode": on_board.DOWNLOAD_MODE_PARAM,
            "limits_conf": LIMITS_CONF,
        }
        spec["read_dir"] = {"limits_d": LIMITS_D}
        spec["stat"] = {"fastrpc_device": on_board.FASTRPC_DEVICE, "fastrpc_lib": on_board.FASTRPC_LIB}
        spec["units_active"] = {"cdsprpcd": on_board.FASTRPC_SERVICE}
        spec["group_members"] = [on_board.FASTRPC_GROUP]
        for m in models:
            genie = m.runtime == "genie"
            spec["exists"][f"qairt:{m.name}"] = [on_board.qairt_dir(m.qairt)] + on_board.qairt_files(b, m.qairt, genie)
            if m.runtime == "litert_lm":
                spec["exists"][f"runtime:{m.name}"] = [f"{on_board.litert_dir()}/{f}" for f in on_board.LITERT_FILES]
            host = on_board.qairt_host_lib_dir(b, m.qairt)
            skel = f"{on_board.qairt_skel_dir(b, m.qairt)}/{b.skel_lib}"
            spec["qairt"][m.name] = {"root": on_board.QAIRT_ROOT, "marker": f"{on_board.qairt_dir(m.qairt)}/sdk.yaml",
                                     "libs": [f"{host}/libQnnHtp.so", skel]}
            unit = on_board.SERVE_UNIT.replace("@.", f"@{m.name}.")
            spec["units_show"][f"memlock:{m.name}"] = [unit, "LimitMEMLOCK"]
    for m in models:
        mdir = overrides.get(m.name, on_board.model_current(m.name))
        if not smoke_only:
            spec["models"][m.name] = {"dir": mdir, "meta": on_board.MODEL_META,
                                      "json": ["htp_backend_ext_config.json"] if m.runtime == "genie" else [],
                                      "hash": True}
        if expect.smoke:
            spec["runs"][m.name] = {**smoke_run(b, m, expect.prompt, expect.max_tokens, model_dir=mdir),
                                    "repeat": repeat}
    return spec
