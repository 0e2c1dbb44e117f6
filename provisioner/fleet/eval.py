"""The eval step's controller rules: what a board is asked (a suite's requests) and how its answers are judged.

Used by ``fleet eval`` (the edge_llm.fleet.eval action) and, when a release sets a minimum score
(``verify: {eval: {suite, min_score}}``), by the gates of ``fleet deploy`` and ``fleet update-os``: a new model
or image stays only when every model it serves still scores at least ``min_score`` on the board. The
suite travels to the action plugins as data in the ``edge_llm_eval`` variable (:func:`eval_vars`) and is
validated again there (:func:`from_vars`), so the controller's checks and the plugin's are the same code.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from provisioner.eval import score
from provisioner.eval.suite import Suite, SuiteError, parse_suite

#: the host variable holding the suite and the minimum score (edge_llm.fleet.eval, deploy, update_os_gate)
VAR = "edge_llm_eval"
MODULE = "edge_llm.fleet.eval"
#: /health wait before a board's requests (the service may still load its model after a restart or reboot)
HEALTH = {"health_retries": 30, "health_delay": 2.0, "health_timeout": 5.0}


def eval_vars(suite: Suite, min_score: float | None) -> dict[str, Any]:
    """The extra variables that carry ``suite`` (its validated data) and ``min_score`` to the playbooks."""
    return {VAR: {"suite": suite.raw, "source": suite.source,
                  "min_score": None if min_score is None else float(min_score)}}


def from_vars(value: Any) -> tuple[Suite, float | None]:  # noqa: ANN401 - a host variable
    """The suite and minimum score of an ``edge_llm_eval`` value; ValueError naming what is wrong."""
    if not isinstance(value, Mapping) or "suite" not in value:
        raise ValueError(f"{VAR} must be {{suite: <suite data>, source: <name>, min_score: <0..1 or null>}} "
                         "(provisioner fleet eval / the release's verify.eval write it)")
    try:
        suite = parse_suite(dict(value["suite"]) if isinstance(value["suite"], Mapping) else value["suite"],
                            str(value.get("source") or "suite"))
    except SuiteError as exc:
        raise ValueError(str(exc)) from None
    ms = value.get("min_score")
    if ms is not None and (isinstance(ms, bool) or not isinstance(ms, int | float) or not 0 <= ms <= 1):
        raise ValueError(f"{VAR}.min_score must be a number 0..1, got {ms!r}")
    return suite, None if ms is None else float(ms)


def module_args(suite: Suite, instances: list[dict[str, Any]], token_file: str,
                health: Mapping[str, float] | None = None, timeout: int = 120) -> dict[str, Any]:
    """Arguments of the board module: the instances (model, unit, port, bind), the token file, the requests."""
    keep = ("model", "unit", "port", "bind")
    return {"instances": [{k: i[k] for k in keep if k in i} for i in instances], "token_file": token_file,
            "requests": suite.requests(), "timeout": int(timeout), **dict(health or HEALTH)}


def judge(suite: Suite, raw: Mapping[str, Any], models: list[str], min_score: float | None) -> dict[str, Any]:
    """The eval payload of one board from the module's result: per model its score, categories and failures;
    ``ok`` False when a model could not be asked or (with ``min_score``) scored below it."""
    answers = raw.get("answers") or {}
    problems = [str(p) for p in raw.get("problems") or []]
    results: dict[str, Any] = {}
    failures: list[str] = list(problems)
    for model in models:
        if model not in answers:
            continue
        res = score.score_model(suite, dict(answers[model]))
        res["worst"] = score.worst(res)
        results[model] = res
        if min_score is not None and res["score"] < min_score:
            failures.append(below(model, res, min_score))
    if not raw.get("failed") and not results and not problems:
        failures.append("no model answered: nothing serves on this board (fleet launch first)")
    if raw.get("failed"):
        failures.append(f"eval failed on the board: {str(raw.get('msg') or raw.get('module_stderr') or '')[:300]}")
    return {"kind": "eval", "suite": suite.name, "source": suite.source, "min_score": min_score,
            "models": results, "problems": problems, "failures": failures, "ok": not failures}


def below(model: str, res: Mapping[str, Any], min_score: float) -> str:
    """The gate's reason: the score, the floor and the worst failure with the model's own words."""
    line = f"eval: {model} scored {res['score']:.2f} ({res['passed']}/{res['total']}) below min_score {min_score:g}"
    return line + (f"; worst: {res['worst']}" if res.get("worst") else "")


def run(call: Callable[[str, dict[str, Any]], dict[str, Any]], suite: Suite, instances: list[dict[str, Any]],
        token_file: str, min_score: float | None, health: Mapping[str, float] | None = None,
        timeout: int = 120) -> dict[str, Any]:
    """Ask the board (``call(module, args)``, an action plugin's module call) and judge: the eval payload,
    or the module's own result when the board was unreachable (``unreachable`` True)."""
    raw = call(MODULE, module_args(suite, instances, token_file, health, timeout))
    if raw.get("unreachable"):
        return raw
    return judge(suite, raw, [str(i["model"]) for i in instances], min_score)
