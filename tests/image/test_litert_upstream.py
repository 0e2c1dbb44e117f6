"""`provisioner litert build` read against the pinned LiteRT-LM's real BUILD files.

The targets and output paths the build names were once written from a newer tree's reading
(``//c:litert-lm``); at the pin bazel stops with "no such target" on an aarch64 host hours into
the job. These tests hold every name to ``../shared/realworld/upstream/LiteRT-LM-cbf463d/``
(google-ai-edge/LiteRT-LM @ cbf463d97fa3, unmodified), so a wrong one fails here first.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from provisioner.contracts import board as on_board
from provisioner.image import litert as L
from tests.conftest import need_realworld

RULE_RE = re.compile(r'^(\w+)\(\s*name\s*=\s*"([^"]+)"(.*?)^\)', re.S | re.M)


@pytest.fixture(scope="module")
def upstream() -> Path:
    """The pinned tree's real files (skipped where ../shared/realworld is not there)."""
    return need_realworld("upstream", "LiteRT-LM-cbf463d")


def rules(build: Path) -> dict[str, tuple[str, str]]:
    """name -> (rule kind, rule body) of a BUILD file, read as text (rules whose first attribute is name)."""
    return {m.group(2): (m.group(1), m.group(3)) for m in RULE_RE.finditer(build.read_text(encoding="utf-8"))}


@pytest.fixture
def job(tmp_path: Path) -> L.LitertBuild:
    """The build as a user runs it (a QAIRT SDK folder of the pinned version; no tool is started)."""
    (tmp_path / "sdk" / "qairt" / L.QAIRT).mkdir(parents=True)
    return L.LitertBuild(L.LitertOptions(work=tmp_path / "work", out=tmp_path / "out",
                                         qairt_sdk=str(tmp_path / "sdk"), env={}))


def targets(job: L.LitertBuild, step: str) -> list[str]:
    """The bazel labels one step passes."""
    argv = next(c.argv for c in job.steps() if c.name == step)
    assert argv is not None
    return [a for a in argv if a.startswith(("//", "@"))]


def check_in_tree(upstream: Path, package: str, name: str) -> str:
    """The rule kind of ``//package:name``: it must be in the package's real BUILD file.

    Packages whose BUILD file the shared copy does not hold must at least exist in the tree.
    """
    build = upstream / package / "BUILD"
    if not build.is_file():
        assert (upstream / package).is_dir(), f"//{package} is not a package of LiteRT-LM cbf463d"
        return ""
    found = rules(build)
    assert name in found, f"//{package}:{name}: no such target in {package}/BUILD at cbf463d (has {sorted(found)})"
    return found[name][0]


def test_every_bazel_target_exists_at_the_pin(upstream: Path, job: L.LitertBuild) -> None:
    """Each main-repository label of the fetch and build steps names a rule of the pinned tree."""
    labels = targets(job, "build") + targets(job, "fetch")
    assert targets(job, "build") == [L.TARGET_MAIN, L.TARGET_DISPATCH, L.TARGET_CAPI]
    for label in labels:
        if label.startswith("@"):
            continue   # @litert is LiteRT's tree (WORKSPACE http_archive "litert"), not LiteRT-LM's
        package, _, name = label[2:].partition(":")
        check_in_tree(upstream, package, name)


def test_the_c_api_library_is_the_shared_library_google_ships(upstream: Path) -> None:
    """The C API target links a shared library, bazel's output path is its rule, it ships as _ffi.py loads it."""
    package, _, name = L.TARGET_CAPI[2:].partition(":")
    kind, body = rules(upstream / package / "BUILD")[name]
    shared = re.search(r"linkshared\s*=\s*(1|True)", body)
    assert kind == "cc_binary" and shared, f"{L.TARGET_CAPI} is no shared library"
    assert f"{package}/{name}" in L.OUTPUTS[on_board.LITERT_CAPI_LIB]        # cc_binary: output named as the rule
    ffi = (upstream / "python" / "litert_lm" / "_ffi.py").read_text(encoding="utf-8")
    loaded = re.search(r'lib_name = f"(lib[\w-]+)\.\{extension\}"', ffi)
    assert loaded, "_ffi.py no longer names the library it loads"
    assert Path(on_board.LITERT_CAPI_LIB).name == f"{loaded.group(1)}.so"


def test_every_output_path_is_a_rule_at_the_pin(upstream: Path) -> None:
    """Where collect looks in bazel-bin: each main-repository path is a rule's output in the real tree."""
    for dest, candidates in L.OUTPUTS.items():
        for path in candidates:
            if path.startswith("external/"):
                continue   # outputs of the @litert repository
            package, _, name = path.rpartition("/")
            check_in_tree(upstream, package, name)
        assert dest in on_board.LITERT_FILES


def test_fetch_covers_what_the_build_needs(job: L.LitertBuild) -> None:
    """``build --nofetch`` fetches nothing: every target it builds (and its package's loads) is fetched before.

    python/litert_lm/BUILD loads @org_tensorflow, @rules_python and @bazel_skylib (lines 15-21,
    221-223 at cbf463d) and its cc_binary depends on @nlohmann_json; fetching litert_lm_main alone
    does not load that package.
    """
    assert set(targets(job, "build")) <= set(targets(job, "fetch"))
