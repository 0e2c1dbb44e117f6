"""Every Python module the board runs is installed: the service's and our Ansible modules' imports.

OE splits Python's standard library into ``python3-*`` packages; an import whose package nothing
pulls in is a ``ModuleNotFoundError`` on the first real board only (``http.server`` imports
``html``, python3-html; Ansible's ``module_utils/basic.py`` imports ``shlex``, python3-shell).
The imports are read from the files with ``ast`` and mapped to packages with oe-core's own
``python3-manifest.json`` (openembedded-core @ 06dd66e6, ../shared/realworld/upstream).
"""

from __future__ import annotations

import ast
import fnmatch
import json
import sys
from pathlib import Path

import pytest

from tests.conftest import REALWORLD, need_realworld
from tests.image import bbparse

REPO = bbparse.REPO
LAYER = bbparse.LAYER
MANIFEST_PARTS = ("upstream", "oe-core-06dd66e6", "meta", "recipes-devtools", "python", "python3",
                  "python3-manifest.json")
MANIFEST = REALWORLD.joinpath(*MANIFEST_PARTS)
SERVICE_DIR = LAYER / "recipes-ai" / "edge-llm-serve" / "files"
#: the entry point and the package edge_llm_serve: every file of the service the board runs
SERVICE = [SERVICE_DIR / "edge-llm-serve", *sorted((SERVICE_DIR / "edge_llm_serve").rglob("*.py"))]
COLLECTION = REPO / "playbooks" / "collections" / "ansible_collections" / "edge_llm" / "fleet" / "plugins"
LIB = "${libdir}/python${PYTHON_MAJMIN}/"


def ansible_files() -> list[Path]:
    """What Ansible runs on the board for our modules: the modules, their module_utils, Ansible's own.

    AnsiballZ's wrapper (``_internal/_ansiballz/_wrapper.py`` in ansible-core 2.19) runs the module
    with ``module_utils/basic.py``, which every module imports, and each ``ansible.module_utils``
    file that imports in turn (AnsiballZ ships them all in the payload).
    """
    import ansible
    import ansible.module_utils.basic

    own = sorted((COLLECTION / "modules").glob("*.py")) + sorted((COLLECTION / "module_utils").glob("*.py"))
    wrapper = Path(ansible.__file__).parent / "_internal" / "_ansiballz" / "_wrapper.py"
    top = Path(ansible.__file__).parent.parent
    todo, seen = [Path(ansible.module_utils.basic.__file__)], []
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.append(f)
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in (n for n in names if n.startswith("ansible.module_utils")):
                base = top.joinpath(*name.split("."))
                todo += [c for c in (base.with_suffix(".py"), base / "__init__.py") if c.is_file()]
    return [*own, *seen, *([wrapper] if wrapper.is_file() else [])]


def _optional(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """True inside ``try: ... except ImportError`` (or a broader handler): the file runs without it."""
    while node in parents:
        child, node = node, parents[node]
        if isinstance(node, ast.Try) and child in node.body:
            for h in node.handlers:
                names = [h.type] if not isinstance(h.type, ast.Tuple) else list(h.type.elts)
                if h.type is None or any(isinstance(n, ast.Name) and n.id in ("ImportError", "ModuleNotFoundError",
                                                                                "Exception") for n in names):
                    return True
    return False


def stdlib_imports(path: Path) -> set[str]:
    """Standard-library modules ``path`` imports unconditionally, at top level or inside functions."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        if not _optional(node, parents):
            found |= {n for n in names if n.split(".")[0] in sys.stdlib_module_names and n != "__future__"}
    return found


def load_manifest() -> dict[str, dict]:
    """oe-core's manifest: JSON after a block of '#' comment lines."""
    text = MANIFEST.read_text(encoding="utf-8")
    return json.loads("\n".join(ln for ln in text.splitlines() if not ln.startswith("#")))


def package_of(module: str, manifest: dict[str, dict]) -> str:
    """The python3-* package holding ``module`` (its own file, else its package directory's).

    A standard-library module the manifest does not list is compiled into the interpreter
    (sys, time, itertools, ...): python3-core.
    """
    parts = module.split(".")
    for k in range(len(parts), 0, -1):
        rel = "/".join(parts[:k])
        wanted = [rel + ".py", rel, rel + "/__init__.py", f"lib-dynload/{'.'.join(parts[:k])}.cpython-3-x.so"]
        for name, pkg in manifest.items():
            if name == "modules":
                continue   # the meta package that depends on all
            for pattern in pkg["files"]:
                if pattern.startswith(LIB) and any(fnmatch.fnmatchcase(w, pattern[len(LIB):]) for w in wanted):
                    return f"python3-{name}"
    return "python3-core"


def closure(packages: set[str], manifest: dict[str, dict]) -> set[str]:
    """``packages`` and every python3-* package they pull in (the manifest's rdepends)."""
    todo, seen = list(packages), set(packages)
    while todo:
        name = todo.pop().removeprefix("python3-")
        for dep in manifest.get(name, {}).get("rdepends", []):
            if f"python3-{dep}" not in seen:
                seen.add(f"python3-{dep}")
                todo.append(f"python3-{dep}")
    return seen


@pytest.fixture(scope="module")
def manifest() -> dict[str, dict]:
    need_realworld(*MANIFEST_PARTS)
    return load_manifest()


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    """RDEPENDS as bitbake parses them: of the service package, and of what packagegroup-edge-llm installs."""
    env = bbparse.make_env(tmp_path_factory.mktemp("py"), (bbparse.QCOM_DISTRO_FIXTURE,),
                           local_conf='DEBUG_LOGIN = "x"\n')
    serve = bbparse.parse_recipe(LAYER / "recipes-ai/edge-llm-serve/edge-llm-serve_1.0.bb", env)
    group = bbparse.parse_recipe(LAYER / "recipes-core/packagegroups/packagegroup-edge-llm.bb", env)
    service = set(serve.getVar("RDEPENDS:edge-llm-serve").split())
    board = set(group.getVar("RDEPENDS:packagegroup-edge-llm").split())
    assert "edge-llm-serve" in board
    return {"service": service, "board": board | service}


def missing(files: list[Path], have: set[str], manifest: dict[str, dict]) -> dict[str, list[str]]:
    """package -> 'file: module' lines for each import whose package is not installed."""
    out: dict[str, list[str]] = {}
    for f in files:
        for module in sorted(stdlib_imports(f)):
            pkg = package_of(module, manifest)
            if pkg not in have:
                out.setdefault(pkg, []).append(f"{f.name}: {module}")
    return out


def test_manifest_maps_the_modules_the_issue_names(manifest: dict[str, dict]) -> None:
    """The mapping itself, on the cases read by hand from the manifest."""
    assert package_of("html", manifest) == "python3-html"
    assert package_of("shlex", manifest) == "python3-shell"
    assert package_of("http.server", manifest) == "python3-netclient"   # the http/ directory
    assert package_of("ctypes", manifest) == "python3-ctypes"
    assert package_of("sys", manifest) == "python3-core"
    assert "html" in stdlib_imports(Path(__import__("http.server").server.__file__))


def test_the_service_has_every_module_it_imports(manifest: dict[str, dict], installed: dict[str, set[str]]) -> None:
    """edge-llm-serve's own RDEPENDS hold every package its imports (and theirs, one level) live in."""
    import http.server

    files = [*SERVICE, Path(http.server.__file__)]   # http.server imports html at module level
    have = closure(installed["service"], manifest)
    assert missing(files, have, manifest) == {}


def test_our_ansible_modules_have_every_module_they_import(manifest: dict[str, dict],
                                                           installed: dict[str, set[str]]) -> None:
    """What the packagegroup installs holds every package our Ansible modules and Ansible's basic.py import."""
    have = closure(installed["board"], manifest)
    assert missing(ansible_files(), have, manifest) == {}
