"""The import graph of ``provisioner`` follows the data flow the README draws.

The rule, checked on every module (``ast``, module- and function-level imports alike):

- Stages, in flow order: ``manifest``/``catalog`` (0) -> ``plan`` (1) -> ``artifacts``/``check`` (2) ->
  ``image`` (3) -> ``station``/``ota`` (4) -> ``fleet`` (5). A stage never imports a LATER stage: the plan
  cannot depend on how artifacts are fetched, the station not on how the fleet verifies.
- Shared foundations any module may import: ``contracts`` (the typed hand-over between stages),
  ``errors``, ``ui``, ``process``, ``steps``, ``tools``, ``shipped``,
  ``yamlsafe``, ``hashing`` (sha256 of a file/tree, used by every stage). Foundations import only
  foundations and ``catalog`` (data, not a stage's logic): the contracts stand on no stage.
- ``station`` and ``fleet`` read models, pins and thresholds from the release contract, never from
  the ``Manifest`` nor from the image stage that writes it: they may not import ``manifest``, ``plan``
  or ``image``.
- ``cli``, ``rehearse`` (with its OTA steps, ``rehearse_ota``) and ``__main__`` are the edges and may
  import anything.
- Nothing but ``rehearse``, ``rehearse_ota`` and ``cli.sim`` (and ``sim`` itself) imports
  ``provisioner.sim``: production
  never depends on the simulator. ``sim`` may import foundations, catalog and data types, but not
  the station's or the fleet's logic it stands in for.

A release folder's ``release.json`` is read and written only through its contract
(``contracts.release_document``: one typed document, one reader, one writer, one schema).

Every module also stays under 600 lines (the developers' rule), so it can be read in one sitting.

``KNOWN`` lists the imports that still break the rule, each with why it is there; the list may
only shrink (an entry that no longer matches fails the test, so it is removed when fixed).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import provisioner

PKG = Path(provisioner.__file__).resolve().parent
STAGES = {"catalog": 0, "manifest": 0, "plan": 1, "artifacts": 2, "check": 2, "image": 3, "station": 4, "ota": 4,
          "fleet": 5}
FOUNDATIONS = {"contracts", "context", "errors", "ui", "process", "steps", "tools", "shipped",
               "yamlsafe", "hashing"}
EDGES = {"cli", "rehearse", "rehearse_ota", "__main__", "__init__"}
SIM_USERS = {"rehearse", "rehearse_ota", "cli.sim"}

# (importing module, imported module) -> why it is still there
KNOWN: dict[tuple[str, str], str] = {
    ("sim.control", "manifest"): "`sim up --manifest` stands in for `provisioner build`: it reads the user's "
                                 "manifest the way the build does (load_manifest is the user-facing reader, "
                                 "not a parser of something the simulator imitates) to make the synthetic image",
}


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts) or "__init__"


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, provisioner-relative module) of every import of ``provisioner`` in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "provisioner":
                found += [(node.lineno, f"provisioner.{a.name}") for a in node.names]
            else:
                found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    out = []
    for line, name in found:
        if name.startswith("provisioner."):
            out.append((line, name.removeprefix("provisioner.")))
    return out


def _resolve(name: str) -> str:
    """The module an imported dotted name lives in (``fleet.verify.HostVars`` -> ``fleet.verify``)."""
    parts = name.split(".")
    while parts:
        cand = PKG.joinpath(*parts)
        if cand.with_suffix(".py").is_file() or (cand / "__init__.py").is_file():
            return ".".join(parts)
        parts = parts[:-1]
    return name


def _kind(module: str) -> str:
    """'edge', 'sim', 'foundation', or the stage name of ``module``."""
    top = module.split(".")[0]
    if module in EDGES or top in EDGES or module == "cli.sim":
        return "edge"
    if top == "sim":
        return "sim"
    if module in FOUNDATIONS or top in FOUNDATIONS:
        return "foundation"
    if top == "board":
        return "foundation"   # the on-board service source: stdlib only, shipped to boards as a file
    return top


def _violation(src: str, dst: str) -> str | None:
    ks, kd = _kind(src), _kind(dst)
    if kd == "sim" and ks != "sim" and src not in SIM_USERS:
        return "production code imports the simulator"
    if ks in ("edge",) or kd == "foundation" or dst.split(".")[0] == src.split(".")[0]:
        return None
    if ks == "foundation":
        return None if kd == "catalog" else "a foundation imports a stage"
    if ks == "sim":
        return None if kd in ("catalog",) else "the simulator imports the logic it stands in for"
    if kd in STAGES and ks in STAGES:
        if STAGES[kd] > STAGES[ks]:
            return f"{ks} (stage {STAGES[ks]}) imports a later stage {kd} ({STAGES[kd]})"
        if ks in ("station", "fleet") and kd in ("manifest", "plan"):
            return f"{ks} reads the Manifest/plan instead of the release contract"
        if ks in ("station", "fleet") and kd == "image":
            return f"{ks} reads the image stage instead of the release contract (contracts.release)"
    return None


def test_imports_follow_the_flow():
    offences, seen_known = [], set()
    for path in sorted(PKG.rglob("*.py")):
        src = _module_name(path)
        for line, name in _imports(path):
            dst = _resolve(name)
            why = _violation(src, dst)
            if why is None:
                continue
            if (src, dst) in KNOWN:
                seen_known.add((src, dst))
                continue
            offences.append(f"{path.relative_to(PKG.parent)}:{line}: {src} -> {dst}: {why}")
    assert not offences, "imports against the flow:\n" + "\n".join(offences)
    stale = set(KNOWN) - seen_known
    assert not stale, f"KNOWN lists imports that are gone (remove them): {sorted(stale)}"


def test_rule_catches_a_backward_import():
    assert _violation("plan", "image.render")
    assert _violation("station", "manifest")
    assert _violation("fleet.verify", "sim.board")
    assert _violation("station.flash", "fleet.inventory")
    assert _violation("station.bundle", "image.release")
    assert _violation("station.bundle", "contracts.release") is None
    assert _violation("plan", "contracts.inventory") is None
    assert _violation("contracts.release", "artifacts.fetch") == "a foundation imports a stage"
    assert _violation("plan", "artifacts.fetch")
    assert _violation("plan", "hashing") is None and _violation("contracts.release", "hashing") is None
    assert _violation("cli.sim", "sim.board") is None


RELEASE_CONTRACT = ("provisioner.contracts.release", "provisioner.contracts.release_document")
JSON_CALLS = {"load", "loads", "dump", "dumps"}


def _release_json_offences(path: Path) -> list[str]:
    """Where a module outside ``contracts`` handles a release folder's release.json itself: names the file
    by a literal, or names it by the contract's ``RELEASE_JSON`` and parses or writes JSON."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    out = [f"line {n.lineno}: the literal 'release.json' (use the contract: read_release_json/write_release_json)"
           for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value == "release.json"]
    names_file = any(isinstance(n, ast.ImportFrom) and n.module in RELEASE_CONTRACT
                     and any(a.name == "RELEASE_JSON" for a in n.names) for n in ast.walk(tree))
    if names_file:
        out += [f"line {n.lineno}: json.{n.func.attr} in a module that names RELEASE_JSON"
                for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                and isinstance(n.func.value, ast.Name) and n.func.value.id == "json" and n.func.attr in JSON_CALLS]
    return out


def test_release_json_is_read_and_written_only_through_its_contract():
    """One reader and one writer (contracts.release_document): the image stage, the station, the OTA
    publisher, ``fleet update-os`` and the rehearsal all hold a ReleaseDocument, never a dict of their own."""
    offences = [f"{path.relative_to(PKG.parent)}: {what}" for path in sorted(PKG.rglob("*.py"))
                if not _module_name(path).startswith("contracts.")
                for what in _release_json_offences(path)]
    assert not offences, "release.json handled outside its contract:\n" + "\n".join(offences)


def test_release_json_rule_catches_a_raw_reader(tmp_path):
    raw = tmp_path / "raw.py"
    raw.write_text('import json\ndata = json.loads(open("release.json").read())\n')
    named = tmp_path / "named.py"
    named.write_text("import json\nfrom provisioner.contracts.release import RELEASE_JSON\n"
                     "def f(p):\n    return json.loads((p / RELEASE_JSON).read_text())\n")
    assert _release_json_offences(raw) and _release_json_offences(named)


MAX_MODULE_LINES = 600


def test_every_module_is_under_600_lines():
    """A module a newcomer can read in one sitting: past 600 lines, split it along the seams it has.

    The tool, its tests and its bench scripts alike: a test file is read as often as the code it checks.
    """
    files = [f for top in ("provisioner", "tests", "bench") for f in sorted((PKG.parent / top).rglob("*.py"))]
    big = [f"{path.relative_to(PKG.parent)}: {n} lines" for path in files
           if (n := len(path.read_text(encoding="utf-8").splitlines())) >= MAX_MODULE_LINES]
    assert not big, f"modules of {MAX_MODULE_LINES} lines or more (split them):\n" + "\n".join(big)


# ---------------------------------------------------------------------------------------------
# The board's contract: its paths are written down in contracts/board.py only
# ---------------------------------------------------------------------------------------------

LAYER = PKG.parent / "layers" / "meta-edge-llm"
#: the layer's weak defaults of the board variables, held equal to contracts.board by tests/image/test_layer.py
LAYER_DEFAULTS = LAYER / "conf" / "edge-llm-board.conf"


def _board_paths() -> dict[str, str]:
    """Every absolute path contracts/board.py names (module constants), by constant name."""
    from provisioner.contracts import board

    return {k: v for k, v in vars(board).items() if k.isupper() and isinstance(v, str) and v.startswith("/")}


def _restates(text: str, path: str) -> bool:
    """``text`` names ``path`` itself (not a longer path that starts with it, e.g. ``/etc/edge-llm/x``)."""
    at = text.find(path)
    while at >= 0:
        end = at + len(path)
        if end == len(text) or not (text[end].isalnum() or text[end] in "/._-*"):
            return True
        at = text.find(path, end)
    return False


def _code_strings(path: Path) -> list[tuple[int, str]]:
    """The string literals of a module that are not docstrings (prose may name a path; code must import it)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def _layer_lines(path: Path) -> list[tuple[int, str]]:
    """A layer file's lines that are not comments (a recipe's prose in a comment may name a path)."""
    return [(i, ln) for i, ln in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if not ln.lstrip().startswith("#")]


def test_board_paths_are_defined_only_in_contracts_board():
    """No provisioner module (the simulator, which plays the board, aside) and no layer recipe, class,
    config or unit restates a board path: they import contracts.board or read its ${EDGE_LLM_*} variables."""
    paths = _board_paths()
    assert len(paths) > 20 and "RELEASE_JSON" in paths and "LIMITS_FILE" in paths
    offences = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        if rel == "contracts/board.py" or rel.startswith("sim/"):
            continue
        for line, text in _code_strings(path):
            offences += [f"provisioner/{rel}:{line}: {name}" for name, value in paths.items() if _restates(text, value)]
    # every file of the layer: recipes, classes, configs, units and the scripts recipes install. Not the
    # README (prose for people; tests/image/test_layer_readme.py holds its paths to the contract), nor the board-side
    # edge_llm_serve package (stdlib only, it cannot import the contract; the one path it names, the token
    # file, is held equal to contracts.board by tests/ota/test_publish_secrets.py)
    layer_files = [p for p in LAYER.rglob("*") if p.is_file() and p != LAYER_DEFAULTS and p.name != "README.md"
                   and "edge_llm_serve" not in p.parts and "__pycache__" not in p.parts]
    assert {"edge-llm-serve@.service", "edge-llm-identity", "edge-llm-boot-check"} <= {p.name for p in layer_files}
    for path in sorted(layer_files):
        python = path.suffix == ".py" or path.read_text(encoding="utf-8").startswith("#!/usr/bin/env python3")
        for line, text in (_code_strings(path) if python else _layer_lines(path)):
            offences += [f"{path.relative_to(PKG.parent)}:{line}: {name}"
                         for name, value in paths.items() if _restates(text, value)]
    assert not offences, "board paths restated outside contracts/board.py:\n" + "\n".join(offences)


def test_restating_rule_catches_a_path_and_spares_a_longer_one():
    assert _restates('RELEASE = "/etc/edge-llm/release.json"', "/etc/edge-llm/release.json")
    assert _restates("reach /dev/fastrpc-cdsp only", "/dev/fastrpc-cdsp")
    assert not _restates("/etc/edge-llm/station_key", "/etc/edge-llm")


def test_the_serve_unit_text_exists_once():
    """The unit's words live in the layer's unit file only: the fleet and the virtual image fill it in."""
    from provisioner.contracts import board
    from provisioner.fleet import launch

    marker = "Description=edge-llm inference service"
    holders = [p for p in [*PKG.rglob("*.py"), *(f for f in LAYER.rglob("*") if f.is_file())]
               if "__pycache__" not in p.parts and marker in p.read_text(encoding="utf-8", errors="replace")]
    assert holders == [board.SERVE_UNIT_SOURCE], holders
    assert launch.unit_text("llm") == board.serve_unit_text("llm")
    assert not re.search(r"@[A-Z_]+@", board.serve_unit_text("llm"))


ROOT = PKG.parent
PLAYBOOKS = ROOT / "playbooks"
ACTIONS = PLAYBOOKS / "collections/ansible_collections/edge_llm/fleet/plugins/action"

#: operation module (provisioner/fleet/<op>.py) -> its playbooks, the roles they run, the action plugins those
#: roles (or the playbook itself) call. Pull mode is two playbooks: ``pull.yml`` installs it, a board runs
#: ``local.yml`` on itself with the verify and deploy roles (whose actions belong to those operations).
OPERATIONS: dict[str, dict[str, tuple[str, ...]]] = {
    "verify": {"playbooks": ("verify.yml",), "roles": ("edge_llm_verify",), "actions": ("verify",)},
    "deploy": {"playbooks": ("deploy.yml",), "roles": ("edge_llm_deploy",), "actions": ("deploy",)},
    "rollback": {"playbooks": ("rollback.yml",), "roles": (), "actions": ()},
    "launch": {"playbooks": ("launch.yml",), "roles": ("edge_llm_serve",), "actions": ("serve",)},
    "update_os": {"playbooks": ("update-os.yml",), "roles": ("edge_llm_update_os",),
                  "actions": ("ostree", "update_os_gate")},
    "benchmark": {"playbooks": ("benchmark.yml",), "roles": ("edge_llm_benchmark",), "actions": ("benchmark",)},
    "pull": {"playbooks": ("pull.yml", "local.yml"), "roles": ("edge_llm_pull",), "actions": ()},
    "eval": {"playbooks": ("eval.yml",), "roles": (), "actions": ("eval",)},
}
#: rollback is the deploy role's ``tasks_from: rollback.yml`` and the deploy action's ``mode: rollback``
SHARED_WITH = {"rollback": "deploy"}
NOT_OPERATIONS = {"__init__", "runner"}    # the package and the runner that runs any operation


def _listed(key: str) -> list[str]:
    return sorted(x for op in OPERATIONS.values() for x in op[key])


def test_playbooks_roles_actions_and_operation_modules_map_one_to_one():
    """A newcomer finds an operation's controller rules from its playbook's name: ``playbooks/<op>.yml``, its
    role and action plugins, and ``provisioner/fleet/<op>.py`` (dashes as underscores), nothing unmapped."""
    modules = sorted(p.stem for p in (PKG / "fleet").glob("*.py") if p.stem not in NOT_OPERATIONS)
    assert modules == sorted(OPERATIONS), "provisioner/fleet/ holds one module per operation (+ runner, shared/)"
    assert sorted(p.name for p in PLAYBOOKS.glob("*.yml")) == _listed("playbooks")
    assert sorted(p.name for p in (PLAYBOOKS / "roles").iterdir() if p.is_dir()) == _listed("roles")
    assert sorted(p.stem for p in ACTIONS.glob("*.py")) == _listed("actions")
    names = [p for op in OPERATIONS.values() for p in op["playbooks"]]
    assert len(names) == len(set(names)) and len(_listed("roles")) == len(set(_listed("roles")))
    plugin_utils = "\n".join(p.read_text(encoding="utf-8") for p in (ACTIONS.parent / "plugin_utils").glob("*.py"))
    for op, parts in OPERATIONS.items():
        assert parts["playbooks"][0].removesuffix(".yml").replace("-", "_") == op
        owner = OPERATIONS[SHARED_WITH.get(op, op)]
        plays = "\n".join((PLAYBOOKS / p).read_text(encoding="utf-8") for p in parts["playbooks"])
        for role in owner["roles"]:
            assert f"name: {role}" in plays or f"role: {role}" in plays, f"{parts['playbooks']} do not run {role}"
        tasks = plays + "\n".join(t.read_text(encoding="utf-8") for role in owner["roles"]
                                   for t in (PLAYBOOKS / "roles" / role / "tasks").glob("*.yml"))
        for action in owner["actions"]:
            assert f"edge_llm.fleet.{action}:" in tasks, f"roles of {op} do not call edge_llm.fleet.{action}"
            source = (ACTIONS / f"{action}.py").read_text(encoding="utf-8")
            assert re.search(rf"\b(fleet_)?{op}\.\w", source), f"action {action} does not use provisioner.fleet.{op}"
        if owner["actions"]:
            assert re.search(rf"from provisioner\.fleet import [^\n]*\b{op}\b", plugin_utils), \
                f"plugin_utils/ does not import provisioner.fleet.{op}"


def test_the_model_rollback_rule_lives_in_the_module_named_rollback():
    """Where a version may become ``current`` and where it falls back to: one file, named for it."""
    rollback = (PKG / "fleet" / "rollback.py").read_text(encoding="utf-8")
    assert "def fallback(" in rollback and "def rollback_steps(" in rollback
    others = [p.relative_to(PKG.parent) for p in (PKG / "fleet").rglob("*.py")
              if p.name != "rollback.py" and re.search(r"def (_?fallback|rollback_\w+)\(", p.read_text("utf-8"))]
    assert not others, f"rollback rules outside fleet/rollback.py: {others}"
