"""Judge a board's answers to an eval suite: per case right or wrong, per model a score and per category.

An answer is what the board module (edge_llm.fleet.eval) brought back of one chat completion:
``{"status", "content", "tool_calls", "finish_reason", "error"}``. It is board text, untrusted: it is
only compared here, never evaluated, and the report shows it as plain text with control characters
made visible (provisioner.fleet.shared.report.visible_text).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Any

from provisioner.eval.suite import Call, Case, Suite

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")
_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S)
#: how much of a wrong answer the report keeps
SHOWN = 300


@dataclass(frozen=True)
class Verdict:
    case: str
    category: str
    ok: bool
    expected: str
    got: str                 # the model's answer as text (content, or its calls), cut at SHOWN
    why: str = ""


def answer_text(answer: dict[str, Any]) -> str:
    """What the model said: its calls as ``name({...})``, then its text, or the error that came back instead
    (with the model's words beside it when the service sent them: an answer it refused to pass on)."""
    if answer.get("error"):
        said = f" the model said: {answer['content']}" if answer.get("content") else ""
        return f"(no answer: {str(answer['error'])[:SHOWN // 2]}){said}"[:SHOWN]
    calls = [f"{c.get('name')}({c.get('arguments')})" for c in _calls(answer)]
    text = " ".join(calls + ([str(answer.get("content"))] if answer.get("content") else []))
    return text[:SHOWN] if text else "(empty answer)"


def _calls(answer: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for c in answer.get("tool_calls") or []:
        fn = (c or {}).get("function") if isinstance(c, dict) else None
        if isinstance(fn, dict):
            out.append({"name": fn.get("name"), "arguments": fn.get("arguments")})
    return out


def _norm(text: str) -> str:
    return " ".join(text.strip().strip(" .!?\"'`").split()).casefold()


def _same(expected: Any, got: Any) -> bool:  # noqa: ANN401 - JSON values
    """JSON values equal; texts with case and surrounding spaces ignored, ints and floats by value."""
    if isinstance(expected, dict) and set(expected) == {"one_of"} and isinstance(expected["one_of"], list):
        return any(_same(e, got) for e in expected["one_of"])
    if isinstance(expected, str):
        return isinstance(got, str) and _norm(expected) == _norm(got)
    if isinstance(expected, bool) or isinstance(got, bool):
        return expected is got
    if isinstance(expected, int | float):
        return isinstance(got, int | float) and abs(float(expected) - float(got)) < 1e-9
    if isinstance(expected, list):
        return isinstance(got, list) and len(got) == len(expected) and all(map(_same, expected, got))
    if isinstance(expected, dict):
        return isinstance(got, dict) and set(got) == set(expected) and all(_same(v, got[k])
                                                                           for k, v in expected.items())
    return expected == got


def _arguments(raw: Any) -> dict[str, Any] | None:  # noqa: ANN401
    """A call's arguments: OpenAI sends them as JSON text; None when they are not a JSON object."""
    if isinstance(raw, dict):
        return raw
    try:
        val = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        return None
    return val if isinstance(val, dict) else None


def _call_matches(want: Call, got: dict[str, Any], params: dict[str, Any]) -> str:
    """'' when ``got`` is the call ``want`` (tool and argument values), else why not."""
    if got.get("name") != want.name:
        return f"called {got.get('name')!r}, not {want.name!r}"
    args = _arguments(got.get("arguments"))
    if args is None:
        return f"{want.name}: arguments are not a JSON object"
    for k, v in want.arguments.items():
        if k not in args:
            return f"{want.name}: argument {k!r} missing"
        if not _same(v, args[k]):
            return f"{want.name}: {k}={args[k]!r}, expected {v!r}"
    props = (params.get("properties") or {})
    stray = [k for k in args if k not in props]
    if stray:
        return f"{want.name}: unknown argument(s) {stray}"
    return ""


def _first_json(text: str) -> Any:  # noqa: ANN401
    """The first JSON object in ``text`` (inside a ``` fence or bare), None when there is none."""
    for block in [*_FENCE.findall(text), text]:
        start = block.find("{")
        while start != -1:
            try:
                val, _ = json.JSONDecoder().raw_decode(block[start:])
            except ValueError:
                start = block.find("{", start + 1)
                continue
            if isinstance(val, dict):
                return val
            start = block.find("{", start + 1)
    return None


def _field(obj: Any, path: str) -> tuple[bool, Any]:  # noqa: ANN401
    for part in path.split("."):
        if isinstance(obj, dict) and part in obj:
            obj = obj[part]
        elif isinstance(obj, list) and part.isdigit() and int(part) < len(obj):
            obj = obj[int(part)]
        else:
            return False, None
    return True, obj


def judge(case: Case, answer: dict[str, Any], tools: dict[str, dict[str, Any]]) -> Verdict:
    """One case's verdict on one answer."""
    check = case.expect
    got = answer_text(answer)

    def v(ok: bool, why: str = "") -> Verdict:
        return Verdict(case.id, case.category, ok, check.describe(), got, "" if ok else why)

    if answer.get("error"):
        return v(False, "no answer")
    calls = _calls(answer)
    text = str(answer.get("content") or "")
    if check.kind == "no_call":
        return v(not calls, f"called {', '.join(str(c['name']) for c in calls)} though no tool was needed")
    if check.kind in ("call", "calls"):
        wanted = [check.value] if check.kind == "call" else list(check.value)
        if len(calls) != len(wanted):
            return v(False, f"{len(calls)} call(s), expected {len(wanted)}")
        left = list(calls)
        for w in wanted:
            params = (tools.get(w.name) or {}).get("parameters") or {}
            whys = [_call_matches(w, g, params) for g in left]
            if "" not in whys:
                return v(False, whys[0] if whys else "no call left")
            left.pop(whys.index(""))
        return v(True)
    if calls:
        return v(False, "answered with a tool call, expected text")
    if check.kind == "exact":
        return v(_norm(text) == _norm(check.value), "not the exact answer")
    if check.kind == "contains":
        wanted = check.value if isinstance(check.value, tuple) else (check.value,)
        missing = [w for w in wanted if w.casefold() not in text.casefold()]
        return v(not missing, f"missing {missing}")
    if check.kind == "regex":
        return v(re.search(check.value, text, re.I) is not None, "no match")
    if check.kind == "number":
        nums = _NUMBER.findall(text)
        if not nums:
            return v(False, "no number in the answer")
        try:
            last = float(nums[-1].replace(",", ""))
        except ValueError:
            return v(False, f"{nums[-1]!r} is not a number")
        return v(abs(last - check.value) <= check.tolerance, f"last number {last:g}")
    obj = _first_json(text)
    if obj is None:
        return v(False, "no JSON object in the answer")
    for path, want in check.value.items():
        found, val = _field(obj, path)
        if not found:
            return v(False, f"field {path!r} missing")
        if not _same(want, val):
            return v(False, f"{path}={val!r}, expected {want!r}")
    return v(True)


def score_model(suite: Suite, answers: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One model's result: score (0..1), passed/total, per category, and the failed cases in suite order."""
    verdicts = [judge(c, answers.get(c.id) or {"error": "not asked"}, suite.tools) for c in suite.cases]
    cats: dict[str, dict[str, int]] = {}
    for vd in verdicts:
        row = cats.setdefault(vd.category, {"passed": 0, "total": 0})
        row["total"] += 1
        row["passed"] += int(vd.ok)
    passed = sum(vd.ok for vd in verdicts)
    return {"score": round(passed / len(verdicts), 4) if verdicts else 0.0, "passed": passed,
            "total": len(verdicts),
            "categories": {k: {**r, "score": round(r["passed"] / r["total"], 4)} for k, r in cats.items()},
            "failures": [asdict(vd) for vd in verdicts if not vd.ok]}


def worst(result: dict[str, Any]) -> str:
    """The first failure of a model's result as one line: case, expectation, what the model said."""
    f = (result.get("failures") or [None])[0]
    if not f:
        return ""
    got = f["got"] if len(f["got"]) <= 120 else f["got"][:117] + "..."
    return f"{f['case']}: expected {f['expected']}, got {got!r}" + (f" ({f['why']})" if f.get("why") else "")
