"""Bounded YAML reading for files users hand us (manifests, tool-versions.yaml, ...).

``yaml.safe_load`` refuses Python objects but still expands aliases: a 1.9 KB "billion laughs"
document (nine anchors, each a list of ten aliases to the previous one) composes 10^9 nodes,
takes tens of seconds and gigabytes, then dies with MemoryError. None of our inputs need anchors
or aliases, so the loader here refuses them at the first one, with its line and column, before
anything is expanded. A key given twice (PyYAML keeps the last silently), syntax errors and absurd
nesting become the same one-line error.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.events import AliasEvent, CollectionStartEvent, ScalarEvent

from provisioner.errors import UserError


class YamlError(UserError):
    """A YAML text is malformed or uses a feature we refuse (anchors, aliases).

    ``str(err)`` is one located line: ``<source>: line L, column C: <problem>``. Callers that
    have a more specific error family (ManifestError, ArtifactError) re-raise with
    ``err.message`` / ``err.hint``.
    """

    def __init__(self, source: str, problem: str, hint: str | None = None,
                 line: int | None = None, column: int | None = None) -> None:
        where = f" line {line}, column {column}:" if line is not None else ""
        super().__init__(f"{source}:{where} {problem}", hint)
        self.source = source
        self.problem = problem
        self.line = line
        self.column = column


class _NoAliasLoader(yaml.SafeLoader):
    """SafeLoader whose composer stops at the first anchor or alias instead of expanding it."""

    def compose_node(self, parent: Any, index: Any) -> Any:  # noqa: ANN401 - PyYAML's signature
        event = self.peek_event()
        if isinstance(event, AliasEvent) or (
                isinstance(event, ScalarEvent | CollectionStartEvent) and event.anchor is not None):
            kind = "alias *" if isinstance(event, AliasEvent) else "anchor &"
            mark = event.start_mark
            raise _Refused(f"YAML {kind}{event.anchor} is not accepted", mark,
                           "write the value out in full (anchors and aliases are refused)")
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:  # noqa: ANN401 - PyYAML's signature
        """Refuse a key given twice: PyYAML keeps the last one silently (``image:`` twice loses the first)."""
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:       # unhashable key: PyYAML's own error says so
                break
            if duplicate:
                raise _Refused(f"key {key!r} is given twice", key_node.start_mark, "give each key once")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


class _Refused(Exception):
    def __init__(self, problem: str, mark: Any, hint: str) -> None:  # noqa: ANN401 - a yaml Mark
        super().__init__(problem)
        self.problem = problem
        self.mark = mark
        self.hint = hint


def load_yaml(text: str, source: str) -> Any:  # noqa: ANN401 - any YAML value
    """Parse one YAML document without anchors/aliases; raise YamlError (located) on any problem.

    ``source`` names the file in the message (a path or a label such as ``tool-versions.yaml``).
    """
    loader = _NoAliasLoader(text)
    try:
        return loader.get_single_data()
    except _Refused as exc:
        raise YamlError(source, exc.problem, exc.hint, exc.mark.line + 1, exc.mark.column + 1) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise YamlError(source, f"YAML syntax error: {problem}", "fix the indentation/quoting at that line",
                        mark.line + 1 if mark else None, mark.column + 1 if mark else None) from None
    except RecursionError:
        raise YamlError(source, "YAML nested too deeply", "flatten the document") from None
    finally:
        loader.dispose()
