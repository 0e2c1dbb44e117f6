"""A small JSON Schema subset, checked with the standard library, for ``response_format: json_schema``.

Why a subset and not a library: the board's image carries the service on the standard library only,
and Genie has no constrained decoding, so the service must itself say whether an answer fits. The
keywords below are the ones OpenAI's Structured Outputs guide lists as supported ("Supported
schemas": type, properties, required, items, enum, const, additionalProperties, and the string,
number and array bounds, ``anyOf``, and local ``$ref`` into ``$defs``), with their meaning from JSON
Schema 2020-12 (json-schema.org/draft/2020-12, "Core" for ``$ref``/``$defs``/``anyOf``, "Validation"
for the rest). ``anyOf`` and ``$ref`` matter in practice: pydantic writes ``Optional[X]`` as
``anyOf: [X, {"type": "null"}]`` and a nested model as ``{"$ref": "#/$defs/Model"}``, and that is what
the openai client sends for ``chat.completions.parse(response_format=Model)`` and
``pydantic_function_tool`` (openai 3.57.0, openai/lib/_pydantic.py, ``to_strict_json_schema``). A
schema that uses any other keyword is refused when the request arrives (:func:`unsupported`):
a keyword that is not checked would be a promise silently not kept.
"""

from __future__ import annotations

import math
from typing import Any

#: keywords that constrain, all checked by :func:`problems`
CHECKED = frozenset({"type", "properties", "required", "items", "enum", "const", "additionalProperties",
                     "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength",
                     "minItems", "maxItems", "anyOf", "$ref", "$defs"})
#: keywords that only annotate (JSON Schema 2020-12 "Meta-Data" vocabulary, $schema/$id/$comment)
ANNOTATIONS = frozenset({"title", "description", "default", "examples", "deprecated", "readOnly", "writeOnly",
                         "$schema", "$id", "$comment"})
TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")


def _resolve(root: Any, ref: Any) -> Any:
    """The schema a local ``$ref`` ("#/$defs/Name", a JSON Pointer into the root) points at, or None."""
    if not isinstance(ref, str) or not (ref == "#" or ref.startswith("#/")):
        return None
    target = root
    for part in ref[2:].split("/") if ref != "#" else ():
        part = part.replace("~1", "/").replace("~0", "~")      # RFC 6901 escapes
        if not isinstance(target, dict) or part not in target:
            return None
        target = target[part]
    return target if isinstance(target, (dict, bool)) else None


def unsupported(schema: Any, where: str = "schema", root: Any = None) -> tuple[str, str] | None:
    """(path, why) of the first part of ``schema`` this checker cannot enforce, or None."""
    root = schema if root is None else root
    if isinstance(schema, bool):
        return None
    if not isinstance(schema, dict):
        return where, "a schema must be a JSON object"
    for key, value in schema.items():
        if key not in CHECKED and key not in ANNOTATIONS:
            return f"{where}.{key}", f"the keyword {key!r} is not supported (supported: {', '.join(sorted(CHECKED))})"
        if key == "type":
            kinds = value if isinstance(value, list) else [value]
            if not kinds or any(k not in TYPES for k in kinds):
                return f"{where}.type", f"must be one of {', '.join(TYPES)} (or a list of them)"
        elif key in ("properties", "$defs"):
            if not isinstance(value, dict):
                return f"{where}.{key}", "must be an object of schemas"
            for name, sub in value.items():
                found = unsupported(sub, f"{where}.{key}.{name}", root)
                if found:
                    return found
        elif key in ("items", "additionalProperties"):
            found = unsupported(value, f"{where}.{key}", root)
            if found:
                return found
        elif key == "anyOf":
            if not isinstance(value, list) or not value:
                return f"{where}.anyOf", "must be a non-empty list of schemas"
            for n, sub in enumerate(value):
                found = unsupported(sub, f"{where}.anyOf[{n}]", root)
                if found:
                    return found
        elif key == "$ref" and _resolve(root, value) is None:
            return f"{where}.$ref", "must point into this schema (\"#/$defs/Name\"); other references are not supported"
        elif key == "required" and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            return f"{where}.required", "must be a list of property names"
        elif key == "enum" and not isinstance(value, list):
            return f"{where}.enum", "must be a list"
        elif key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum") and \
                (isinstance(value, bool) or not isinstance(value, (int, float))):
            return f"{where}.{key}", "must be a number"
        elif key in ("minLength", "maxLength", "minItems", "maxItems") and \
                (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            return f"{where}.{key}", "must be a non-negative integer"
    return None


def _is(kind: str, value: Any) -> bool:
    if kind == "object":
        return isinstance(value, dict)
    if kind == "array":
        return isinstance(value, list)
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "null":
        return value is None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    # 2020-12: an integer is a number with a zero fractional part (1.0 is an integer)
    # (an int is checked as an int: float() of a 400-digit JSON integer raises OverflowError)
    return kind == "number" or isinstance(value, int) or (math.isfinite(value) and value.is_integer())


def _same(a: Any, b: Any) -> bool:
    """JSON equality: true is not 1, 1 is 1.0 (Python's == says True == 1)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and a == b


def problems(value: Any, schema: Any, where: str = "$", limit: int = 5) -> list[str]:
    """What in ``value`` does not fit ``schema`` (at most ``limit`` lines, JSONPath-like), empty when it fits."""
    out: list[str] = []
    _walk(value, schema, where, out, limit, schema)
    return out[:limit]


def _walk(value: Any, schema: Any, where: str, out: list[str], limit: int, root: Any) -> None:
    if len(out) >= limit or schema is True or schema == {}:
        return
    if schema is False:
        out.append(f"{where}: no value is allowed here")
        return
    if "$ref" in schema:            # 2020-12: the referenced schema applies beside the siblings
        target = _resolve(root, schema["$ref"])     # unsupported() refused any other reference
        if target is not None:
            _walk(value, target, where, out, limit, root)
    if "anyOf" in schema:
        tried = []
        for alt in schema["anyOf"]:
            found: list[str] = []
            _walk(value, alt, where, found, limit, root)
            tried.append(found)
        if all(tried):
            out.append(f"{where}: fits none of anyOf (" + " | ".join(t[0] for t in tried) + ")")
    kinds = schema.get("type")
    if kinds is not None:
        kinds = kinds if isinstance(kinds, list) else [kinds]
        if not any(_is(k, value) for k in kinds):
            out.append(f"{where}: expected {' or '.join(kinds)}, got {_kind_of(value)}")
            return
    if "const" in schema and not _same(value, schema["const"]):
        out.append(f"{where}: must be {schema['const']!r}")
    if "enum" in schema and not any(_same(value, e) for e in schema["enum"]):
        out.append(f"{where}: must be one of {schema['enum']!r}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        for key, bad in (("minimum", lambda b: value < b), ("maximum", lambda b: value > b),
                         ("exclusiveMinimum", lambda b: value <= b), ("exclusiveMaximum", lambda b: value >= b)):
            if key in schema and bad(schema[key]):
                out.append(f"{where}: {value} breaks {key} {schema[key]}")
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            out.append(f"{where}: shorter than {schema['minLength']} characters")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            out.append(f"{where}: longer than {schema['maxLength']} characters")
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            out.append(f"{where}: fewer than {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            out.append(f"{where}: more than {schema['maxItems']} items")
        if "items" in schema:
            for n, item in enumerate(value):
                _walk(item, schema["items"], f"{where}[{n}]", out, limit, root)
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for name in schema.get("required") or ():
            if name not in value:
                out.append(f"{where}: missing required property {name!r}")
        extra = schema.get("additionalProperties", True)
        for name, item in value.items():
            if name in props:
                _walk(item, props[name], f"{where}.{name}", out, limit, root)
            elif extra is False:
                out.append(f"{where}: property {name!r} is not allowed")
            elif isinstance(extra, dict):
                _walk(item, extra, f"{where}.{name}", out, limit, root)


def _kind_of(value: Any) -> str:
    for kind in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _is(kind, value):
            return kind
    return type(value).__name__


def not_strict(schema: Any, where: str = "schema", root: Any = None) -> tuple[str, str] | None:
    """(path, why) where ``schema`` breaks OpenAI's strict mode, or None. OpenAI's Structured Outputs
    guide ("Supported schemas"): with ``strict: true`` every object sets ``additionalProperties: false``
    and lists all its properties in ``required`` (an optional field is a union with null). The checker
    then holds the answer to exactly that shape."""
    root = schema if root is None else root
    if not isinstance(schema, dict):
        return None
    kinds = schema.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if "object" in kinds or "properties" in schema:
        if schema.get("additionalProperties") is not False:
            return f"{where}.additionalProperties", "strict mode needs additionalProperties: false on every object"
        missing = sorted(set(schema.get("properties") or {}) - set(schema.get("required") or ()))
        if missing:
            return f"{where}.required", f"strict mode needs every property required (missing: {', '.join(missing)})"
    subs: list[tuple[str, Any]] = [(f"{where}.properties.{k}", v) for k, v in (schema.get("properties") or {}).items()]
    subs += [(f"{where}.$defs.{k}", v) for k, v in (schema.get("$defs") or {}).items()]
    subs += [(f"{where}.anyOf[{n}]", v) for n, v in enumerate(schema.get("anyOf") or ())]
    if "items" in schema:
        subs.append((f"{where}.items", schema["items"]))
    for path, sub in subs:
        found = not_strict(sub, path, root)
        if found:
            return found
    return None
