"""Eval suite files: the shipped suite loads, every mistake in a user's suite is one located line."""

from __future__ import annotations

import pytest

from provisioner.cli import main
from provisioner.eval.suite import DEFAULT, SuiteError, load_suite, parse_suite


def test_the_default_suite_covers_every_category_of_answer_and_tool_use():
    suite = load_suite(DEFAULT)
    kinds = {c.expect.kind for c in suite.cases}
    assert kinds == {"exact", "contains", "regex", "number", "json", "call", "calls", "no_call"}
    assert {"tool-call", "no-call", "parallel-calls"} <= set(suite.categories)
    reqs = {r["id"]: r["body"] for r in suite.requests()}
    two = reqs["weather-two-cities"]
    assert [t["function"]["name"] for t in two["tools"]] == ["get_weather"]
    assert two["tools"][0]["type"] == "function" and two["tools"][0]["function"]["parameters"]["required"] == ["city"]
    assert "tools" not in reqs["capital-france"] and reqs["capital-france"]["messages"][-1]["role"] == "user"


def _problems(tmp_path, text):
    f = tmp_path / "suite.yaml"
    f.write_text(text)
    with pytest.raises(SuiteError) as exc:
        load_suite(f)
    return f, exc.value.problems


def test_each_mistake_is_one_line_naming_file_case_and_fix(tmp_path):
    f, problems = _problems(tmp_path, """
tools:
  get_weather: {parameters: {type: object, properties: {city: {type: string}}, required: [city]}}
cases:
  - {id: a, ask: hi, expect: {regex: "(unclosed"}}
  - {id: b, ask: hi, expect: {number: five}}
  - {id: c, ask: hi, expect: {call: {name: get_time, arguments: {}}}, tools: [get_weather]}
  - {id: d, ask: hi, expect: {call: {name: get_weather, arguments: {town: Oslo}}}, tools: [get_weather]}
  - {id: e, ask: hi, expect: {no_call: true}}
  - {id: a, ask: hi, expect: {contains: x}, colour: red}
  - {id: g, expect: {exact: x, contains: y}}
""")
    assert len(problems) == 9, problems
    text = "\n".join(problems)
    for needle in ("cases[0] (a).expect.regex: not a valid regular expression",
                   "cases[1] (b).expect.number: must be a number, got 'five'",
                   "cases[2] (c).expect.call.name: 'get_time' is not among the case's tools",
                   "cases[3] (d).expect.call.arguments: ['town'] are not parameters of get_weather",
                   "cases[4] (e).tools: a no_call check needs tools offered",
                   "cases[5] (a).colour: unknown key",
                   "cases[5].id: 'a' is used twice",
                   "cases[6] (g).ask: the question is missing",
                   "cases[6] (g).expect: needs exactly one check"):
        assert needle in text, (needle, text)
    assert all(p.startswith(f"{f}:") and " -> " in p for p in problems)


def test_cli_says_what_is_wrong_in_one_line_and_exits_2(tmp_path, capsys):
    f = tmp_path / "s.yaml"
    f.write_text("cases: []\n")
    assert main(["fleet", "eval", "-i", str(tmp_path / "inv.yml"), "--suite", str(f)]) == 2
    err = capsys.readouterr().err
    assert f"{f}:cases: must be a non-empty list" in err and "Traceback" not in err
    assert main(["fleet", "eval", "-i", str(tmp_path / "inv.yml"), "--suite", str(tmp_path / "none.yaml")]) == 2
    assert "cannot read the eval suite" in capsys.readouterr().err


def test_yaml_errors_and_wrong_shapes_are_located(tmp_path):
    _, problems = _problems(tmp_path, "cases:\n  - {id: a\n")
    assert len(problems) == 1 and "line" in problems[0]
    with pytest.raises(SuiteError, match="top level must be a mapping"):
        parse_suite(["x"], "s.yaml")
