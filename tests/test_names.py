"""Names a newcomer can trust: each of "check", "plan" and "artifacts" names one thing in the package.

- "check" is the manifest + files cross-check (``provisioner check``, check.py) and verify's judged
  items (fleet/verify.py); Ansible's check mode is ``dry_run`` in code (``--check`` on the CLI).
- "plan" is the plan stage (plan.py), in module names and in function/class names; the build's
  decided invocation is ``BuildSetup``, litert's dry run ``describe()``, fetch's list ``fetch_list()``.
- "artifacts" is the model-file stage (provisioner/artifacts/); what boards pull is fleet/shared/deploy_index.py.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from provisioner import tools
from provisioner.errors import BuildError

PKG = Path(__file__).resolve().parents[1] / "provisioner"


def _modules_named(word: str) -> list[str]:
    return sorted(str(p.relative_to(PKG)) for p in PKG.rglob("*") if word in p.stem and "__pycache__" not in p.parts)


@pytest.mark.parametrize(("word", "owners"), [
    ("check", ["check.py", "cli/check.py"]),        # the command and its CLI: one meaning
    ("plan", ["plan.py"]),
    ("artifacts", ["artifacts"]),
])
def test_a_word_names_one_module(word: str, owners: list[str]) -> None:
    assert _modules_named(word) == owners


def test_plan_in_a_name_is_the_plan_stage() -> None:
    """No function, method or class outside plan.py has "plan" in its name (litert's dry run is
    ``describe()``, fetch's list ``fetch_list()``, the build's decided invocation ``BuildSetup``)."""
    offenders = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        if rel == "plan.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and "plan" in node.name.lower():
                offenders.append(f"provisioner/{rel}:{node.lineno}: {node.name}")
    assert not offenders, "'plan' is the plan stage (plan.py) only:\n" + "\n".join(offenders)


def test_fleet_dry_run_is_ansible_check_mode(tmp_path: Path) -> None:
    from provisioner.fleet.runner import build_argv

    argv = build_argv("verify", tmp_path / "inv.yml", dry_run=True)
    assert argv.count("--check") == 1
    assert "--check" not in build_argv("verify", tmp_path / "inv.yml")


def test_kas_container_found_by_the_tools_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """kas-container is looked up like ansible and kas: beside the interpreter, then PATH; else pip's fix."""
    from provisioner.image.container import find_kas_container

    monkeypatch.setattr(tools, "scripts_dirs", lambda: [tmp_path / "bin"])
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(BuildError) as err:
        find_kas_container()
    assert "kas-container not found" in str(err.value) and err.value.hint == f"{sys.executable} -m pip install kas"
    (tmp_path / "bin").mkdir()
    script = tmp_path / "bin" / "kas-container"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    assert find_kas_container() == script


def test_no_bench_script_is_named_like_a_standard_library_module() -> None:
    """``python3 bench/X.py`` puts bench/ first on sys.path, so a script named like a stdlib module (an
    ``inspect.py``) would be imported instead of it by every other script there, and by dataclasses."""
    bench = PKG.parent / "bench"
    shadowing = sorted(p.name for p in bench.glob("*.py") if p.stem in sys.stdlib_module_names)
    assert not shadowing, f"bench scripts named like standard-library modules (rename them): {shadowing}"
