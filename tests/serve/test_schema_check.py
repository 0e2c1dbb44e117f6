"""The JSON Schema subset response_format json_schema is checked against (edge_llm_serve/schema_check.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "layers/meta-edge-llm/recipes-ai/edge-llm-serve/files"))
from edge_llm_serve import schema_check as sc  # noqa: E402

ORDER = {"type": "object", "additionalProperties": False, "required": ["id", "items", "paid"],
         "properties": {
             "id": {"type": "integer", "minimum": 1},
             "paid": {"type": "boolean"},
             "state": {"enum": ["new", "sent"]},
             "version": {"const": 2},
             "note": {"type": ["string", "null"], "maxLength": 5},
             "items": {"type": "array", "minItems": 1, "maxItems": 2, "items": {
                 "type": "object", "required": ["sku"], "properties": {
                     "sku": {"type": "string", "minLength": 3},
                     "qty": {"type": "number", "exclusiveMinimum": 0, "maximum": 10}}}}}}


def test_a_fitting_value_has_no_problems():
    good = {"id": 1, "paid": False, "state": "new", "version": 2.0, "note": None,
            "items": [{"sku": "abc", "qty": 0.5}, {"sku": "defg"}]}
    assert sc.unsupported(ORDER) is None and sc.problems(good, ORDER) == []


@pytest.mark.parametrize(("value", "why"), [
    ({"id": 0, "paid": True, "items": [{"sku": "abc"}]}, "$.id: 0 breaks minimum 1"),
    ({"id": 1.5, "paid": True, "items": [{"sku": "abc"}]}, "$.id: expected integer, got number"),
    ({"id": True, "paid": True, "items": [{"sku": "abc"}]}, "$.id: expected integer, got boolean"),
    ({"id": 1, "paid": 1, "items": [{"sku": "abc"}]}, "$.paid: expected boolean, got integer"),
    ({"id": 1, "paid": True, "items": []}, "$.items: fewer than 1 items"),
    ({"id": 1, "paid": True, "items": [{"sku": "ab"}]}, "$.items[0].sku: shorter than 3 characters"),
    ({"id": 1, "paid": True, "items": [{"sku": "abc", "qty": 0}]}, "$.items[0].qty: 0 breaks exclusiveMinimum 0"),
    ({"id": 1, "paid": True, "items": [{"qty": 1}]}, "$.items[0]: missing required property 'sku'"),
    ({"id": 1, "paid": True, "items": [{"sku": "abc"}], "x": 1}, "$: property 'x' is not allowed"),
    ({"id": 1, "paid": True, "items": [{"sku": "abc"}], "state": "lost"}, "$.state: must be one of"),
    ({"id": 1, "paid": True, "items": [{"sku": "abc"}], "version": True}, "$.version: must be 2"),
    ({"id": 1, "paid": True, "items": [{"sku": "abc"}], "note": "toolong"}, "$.note: longer than 5"),
    ([1], "$: expected object, got array"),
])
def test_each_keyword_names_what_breaks_it(value, why):
    assert any(p.startswith(why) for p in sc.problems(value, ORDER)), sc.problems(value, ORDER)


@pytest.mark.parametrize(("schema", "where"), [
    ({"type": "object", "anyOf": []}, "schema.anyOf"),
    ({"anyOf": [{"type": "string", "format": "email"}]}, "schema.anyOf[0].format"),
    ({"$defs": {"a": {"oneOf": []}}}, "schema.$defs.a.oneOf"),
    ({"$ref": "https://example.com/s.json"}, "schema.$ref"),
    ({"properties": {"a": {"type": "string", "pattern": "^x"}}}, "schema.properties.a.pattern"),
    ({"items": {"$ref": "#/defs/x"}}, "schema.items.$ref"),
    ({"type": "strings"}, "schema.type"),
    ({"required": "a"}, "schema.required"),
    ({"maxLength": -1}, "schema.maxLength"),
])
def test_a_keyword_outside_the_subset_is_named_so_it_is_refused_not_unchecked(schema, where):
    found = sc.unsupported(schema)
    assert found is not None and found[0] == where


def test_a_huge_integer_is_an_integer_not_a_crash():
    assert sc.problems(10 ** 400, {"type": "integer"}) == []
    assert sc.problems(10 ** 400, {"type": "number", "maximum": 5}) != []


PYDANTIC_LIKE = {"$defs": {"Addr": {"type": "object", "properties": {
    "zip": {"anyOf": [{"type": "integer"}, {"type": "null"}]}}, "required": ["zip"], "additionalProperties": False}},
    "type": "object", "properties": {"address": {"$ref": "#/$defs/Addr"}}, "required": ["address"]}


def test_any_of_and_local_refs_are_checked():
    assert sc.unsupported(PYDANTIC_LIKE) is None
    assert sc.problems({"address": {"zip": None}}, PYDANTIC_LIKE) == []
    assert sc.problems({"address": {"zip": 75001}}, PYDANTIC_LIKE) == []
    bad = sc.problems({"address": {"zip": "75001", "x": 1}}, PYDANTIC_LIKE)
    assert any("$.address.zip: fits none of anyOf" in b for b in bad)
    assert any("'x' is not allowed" in b for b in bad)
