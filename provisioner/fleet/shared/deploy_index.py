"""The deploy index for ``fleet deploy``: what the artifact server holds, with sha256 and size.

(Not :mod:`provisioner.artifacts`, the model files the image is built with: these are the files
boards pull after flashing.)

Boards PULL from the artifact server (the controller never streams 3-5 GB per board through
itself). The controller only needs the index: it scans a directory laid out like the server's
document root, hashes each file once (cached by size and mtime in ``.edge-llm-index.json``), and
hands the result to the playbook as ``edge_llm_deploy``. :func:`board_install` then picks, per board,
what its models need and where it goes on the board (:mod:`provisioner.contracts.board`).

Server layout::

    qairt/<build>.tar.gz               -> /opt/qairt/<build>/         (host libs, skels, genie bin)
    litert-lm/<rev>.tar.gz             -> /opt/litert-lm/<rev>/       (bin/litert_lm_main, lib/*.so)
    models/<name>/<version>/<files>    -> /opt/edge-llm/models/<name>/<version>/ (+ current, previous)
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from provisioner import catalog
from provisioner.contracts import board as on_board
from provisioner.contracts.release import MODEL_KINDS, RUNTIMES
from provisioner.errors import FleetError
from provisioner.fleet.launch import instance_unit
from provisioner.fleet.shared.inventory import atomic_write
from provisioner.hashing import SHA256_RE, sha256_file

CACHE_NAME = ".edge-llm-index.json"
PREVIOUS = "previous"      # symlink beside ``current``: the version a rollback returns to
# File beside a version directory (``<version>.committed``), written atomically once that version
# passed its health gate on this board. Like Mender's/RAUC's commit: only a committed version may
# become ``current``; a run that finds ``current`` on an uncommitted one gates it again.
COMMITTED = ".committed"
ARTIFACT_MARK = ".edge-llm-artifact.json"
VERSION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
#: a file of a model version, relative to its folder: plain names joined by '/', nothing that climbs out
FILE_RE = re.compile(r"^(?!.*(?:^|/)\.\.?(?:/|$))[A-Za-z0-9._+-]+(?:/[A-Za-z0-9._+-]+)*$")
#: where boards fetch from: http(s), no whitespace, quotes or template braces
URL_RE = re.compile(r"^https?://[A-Za-z0-9._~:/?#\[\]@!$&()*+,;=%-]+$")


class _Hasher:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.path = root / CACHE_NAME
        try:
            self.data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            self.data = {}
        self.dirty = False

    def entry(self, path: Path) -> dict[str, Any]:
        rel = str(path.relative_to(self.root))
        st = path.stat()
        hit = self.data.get(rel)
        if hit and hit.get("size") == st.st_size and hit.get("mtime_ns") == st.st_mtime_ns:
            return {"size": st.st_size, "sha256": hit["sha256"]}
        sha = sha256_file(path)
        self.data[rel] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha}
        self.dirty = True
        return {"size": st.st_size, "sha256": sha}

    def save(self) -> None:
        if self.dirty:
            try:
                atomic_write(self.path, json.dumps(self.data, indent=1, sort_keys=True))
            except OSError:
                pass   # read-only mirror: hashing again next time is only slower


def build_index(root: Path | str, base_url: str) -> dict[str, Any]:
    """``edge_llm_deploy`` for the artifact tree at ``root`` served at ``base_url``."""
    root = Path(root)
    if not root.is_dir():
        raise FleetError(f"artifact directory {root} does not exist", "pass --artifacts DIR (the server's root)")
    base = base_url.rstrip("/")
    hasher = _Hasher(root)
    index: dict[str, Any] = {"base_url": base, "qairt": [], "runtimes": [], "models": []}
    for tar in sorted((root / "qairt").glob("*.tar.gz")):
        ver = tar.name.removesuffix(".tar.gz")
        if not catalog.is_qairt_build(ver):
            raise FleetError(f"{tar}: '{ver}' is not a QAIRT build id", "name it <major.minor.patch.build>.tar.gz")
        index["qairt"].append({"version": ver, "url": f"{base}/qairt/{tar.name}", **hasher.entry(tar)})
    for tar in sorted((root / "litert-lm").glob("*.tar.gz")):
        rev = tar.name.removesuffix(".tar.gz")
        index["runtimes"].append({"name": "litert_lm", "rev": rev, "url": f"{base}/litert-lm/{tar.name}",
                                  **hasher.entry(tar)})
    for mdir in sorted(p for p in (root / "models").glob("*/*") if p.is_dir()):
        name, version = mdir.parent.name, mdir.name
        if (not VERSION_RE.match(version) or version in ("current", PREVIOUS)
                or version.endswith((".partial", COMMITTED))):
            raise FleetError(f"{mdir}: bad version directory name", "use the sha256 prefix or a plain version")
        meta = _read_meta(mdir / on_board.MODEL_META)
        files = []
        for f in sorted(p for p in mdir.rglob("*") if p.is_file() and p.name != on_board.MODEL_META):
            rel = str(f.relative_to(mdir))
            files.append({"name": rel, "url": f"{base}/models/{name}/{version}/{rel}", **hasher.entry(f)})
        if not files:
            raise FleetError(f"{mdir}: no files", "put the model's files (or the Genie bundle) in it")
        info = catalog.models().get(meta.get("reference") or name)
        kind = meta.get("kind") or ("litertlm" if any(f["name"].endswith(".litertlm") for f in files) else "genie")
        qairt = catalog.normalize_qairt(str(meta.get("qairt") or (info.qairt if info else "")))
        if not catalog.is_qairt_build(qairt):
            raise FleetError(f"{mdir}: unknown QAIRT build for model '{name}'",
                             f"add {on_board.MODEL_META} with \"qairt\": \"<build>\"")
        entry = {"name": name, "version": version, "kind": kind,
                 "runtime": meta.get("runtime") or ("litert_lm" if kind == "litertlm" else "genie"),
                 "qairt": qairt, "files": files, "size": sum(f["size"] for f in files)}
        if kind == "litertlm":
            main = next(f for f in files if f["name"].endswith(".litertlm"))
            entry["sha256"] = main["sha256"]
            entry["file"] = main["name"]
        index["models"].append(entry)
    hasher.save()
    return check_index(index, root)


def _read_meta(path: Path) -> dict[str, Any]:
    """A version folder's ``model.json``, checked by type: each field has the one shape it may have.

    The artifact tree is data from elsewhere; what it says reaches every board, so a field outside its shape
    refuses the whole deploy with one line instead of travelling on.
    """
    if not path.is_file():
        return {}
    hint = (f'write {on_board.MODEL_META} as {{"qairt": "<build>", "kind": "litertlm|genie", '
            '"runtime": "litert_lm|genie"}')
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise FleetError(f"{path}: not readable JSON ({exc})", hint) from None
    if not isinstance(meta, dict):
        raise FleetError(f"{path}: not a JSON object", hint)
    rules = {"reference": lambda v: v in catalog.models(), "kind": lambda v: v in MODEL_KINDS,
             "runtime": lambda v: v in RUNTIMES, "qairt": lambda v: catalog.is_qairt_build(catalog.normalize_qairt(v))}
    for key, ok in rules.items():
        if key in meta and meta[key] is not None and not (isinstance(meta[key], str) and ok(meta[key])):
            raise FleetError(f"{path}: '{key}' is not a valid value: {meta[key]!r:.80}", hint)
    return meta


def _index_problem(index: Any) -> str | None:  # noqa: ANN401 - anything a JSON file holds
    """What is wrong with an artifact index's shape (None when every field is of its type)."""
    def size_ok(v: Any) -> bool:  # noqa: ANN401
        return isinstance(v, int) and not isinstance(v, bool) and v >= 0

    def entry(e: Any, where: str, **rules: Any) -> str | None:  # noqa: ANN401
        if not isinstance(e, dict):
            return f"{where} is not an object"
        for key, ok in rules.items():
            if not ok(e.get(key)):
                return f"{where}.{key} is not valid: {e.get(key)!r:.80}"
        return None

    def text(rx: re.Pattern[str]) -> Any:  # noqa: ANN401
        return lambda v: isinstance(v, str) and bool(rx.match(v))

    if not isinstance(index, dict):
        return "not a JSON object"
    if not text(URL_RE)(index.get("base_url")):
        return f"base_url is not an http(s) URL: {index.get('base_url')!r:.80}"
    lists = {k: index.get(k) or [] for k in ("qairt", "runtimes", "models")}
    for key, items in lists.items():
        if not isinstance(items, list):
            return f"{key} is not a list"
    common = {"url": text(URL_RE), "sha256": text(SHA256_RE), "size": size_ok}
    for i, q in enumerate(lists["qairt"]):
        why = entry(q, f"qairt[{i}]", version=lambda v: isinstance(v, str) and catalog.is_qairt_build(v), **common)
        if why:
            return why
    for i, r in enumerate(lists["runtimes"]):
        why = entry(r, f"runtimes[{i}]", name=lambda v: v == "litert_lm", rev=text(VERSION_RE), **common)
        if why:
            return why
    for i, m in enumerate(lists["models"]):
        why = entry(m, f"models[{i}]", name=text(VERSION_RE), version=text(VERSION_RE),
                    kind=lambda v: v in MODEL_KINDS, runtime=lambda v: v in RUNTIMES,
                    qairt=lambda v: isinstance(v, str) and catalog.is_qairt_build(v), size=size_ok,
                    files=lambda v: isinstance(v, list) and bool(v))
        if why:
            return why
        for j, f in enumerate(m["files"]):
            why = entry(f, f"models[{i}].files[{j}]", name=text(FILE_RE), **common)
            if why:
                return why
        if m["kind"] == "litertlm" and not any(f["name"] == m.get("file") and f["sha256"] == m.get("sha256")
                                               for f in m["files"]):
            return f"models[{i}].file/sha256 name none of its files"
    return None


def check_index(index: Any, where: Path | str) -> dict[str, Any]:  # noqa: ANN401 - anything a JSON file holds
    """``index`` if every field is of its type (each reaches boards and Ansible), else a one-line error."""
    why = _index_problem(index)
    if why:
        raise FleetError(f"artifact index {where}: {why}",
                         "rebuild it from the artifact directory (fleet deploy --artifacts DIR --artifact-url URL)")
    for key in ("qairt", "runtimes", "models"):
        index.setdefault(key, [])
    return index


def load_index(path: Path | str) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise FleetError(f"artifact index {path}: cannot read: {exc}", "pass a JSON index or --artifacts DIR") from exc
    return check_index(data, path)


def model_paths(name: str) -> dict[str, str]:
    """On-board paths of one model's versions (deploy and rollback both use these)."""
    mdir = on_board.model_dir(name)
    return {"dir": mdir, "current": on_board.model_current(name), "previous": f"{mdir}/{PREVIOUS}",
            "committed_suffix": COMMITTED, "unit": instance_unit(name)}


def board_install(index: dict[str, Any], models: list[dict[str, Any]], board_id: str,
                  staging: str = "/opt/edge-llm/.staging") -> dict[str, Any]:
    """What one board must install: trees (QAIRT/runtime tarballs) and model versions, with on-board paths.

    Only models the board's group expects (``edge_llm_models`` names) are deployed; the newest
    index entry per model name wins (the index lists one version per model in practice).
    """
    board = catalog.board(board_id)
    wanted = {m["name"] for m in models}
    picked: dict[str, dict[str, Any]] = {}
    for m in index.get("models") or []:
        if m["name"] in wanted:
            picked[m["name"]] = m
    need_qairt = {m["qairt"] for m in picked.values()}
    need_litert = any(m["runtime"] == "litert_lm" for m in picked.values())
    trees = []
    for q in index.get("qairt") or []:
        if q["version"] in need_qairt:
            trees.append({"kind": "qairt", "name": q["version"], "url": q["url"], "sha256": q["sha256"],
                          "size": q["size"], "dest": on_board.qairt_dir(q["version"]),
                          "staging": f"{staging}/qairt-{q['version']}.tar.gz"})
    missing_q = need_qairt - {t["name"] for t in trees}
    if need_litert:
        for r in index.get("runtimes") or []:
            if r["name"] == "litert_lm":
                trees.append({"kind": "runtime", "name": r["rev"], "url": r["url"], "sha256": r["sha256"],
                              "size": r["size"], "dest": on_board.litert_dir(r["rev"]),
                              "staging": f"{staging}/litert-lm-{r['rev']}.tar.gz"})
    out_models = []
    for m in picked.values():
        vdir = on_board.model_version_dir(m["name"], m["version"])
        meta: dict[str, Any] = {"name": m["name"], "kind": m["kind"], "runtime": m["runtime"], "qairt": m["qairt"],
                                "version": m["version"],
                                "files": [{"name": f["name"], "size": f["size"], "sha256": f["sha256"]}
                                          for f in m["files"]]}
        if m["kind"] == "litertlm":   # one file: its size/sha256 are the model's (Genie: per file only)
            meta.update(sha256=m.get("sha256"), size=next(f["size"] for f in m["files"] if f["name"] == m["file"]),
                        file=m["file"])
        fetch = [{"url": f["url"], "dest": f"{vdir}.partial/{f['name']}", "sha256": f["sha256"], "size": f["size"]}
                 for f in m["files"]]
        paths = model_paths(m["name"])
        out_models.append({"name": m["name"], "version": m["version"], "qairt": m["qairt"], "runtime": m["runtime"],
                           "files": m["files"], "fetch": fetch, "dir": paths["dir"], "version_dir": vdir,
                           "partial_dir": f"{vdir}.partial", "current": paths["current"],
                           "previous": paths["previous"], "meta": meta, "committed": f"{vdir}{COMMITTED}",
                           "unit": paths["unit"], "size": m["size"]})
    return {"board": board.id, "trees": trees, "models": out_models, "missing_qairt": sorted(missing_q),
            "staging": staging, "committed_suffix": COMMITTED}
