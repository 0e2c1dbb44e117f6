"""``release.json``: the typed, frozen document a build writes and every later stage reads.

A release folder comes from elsewhere (a build host, a share, a download), so its ``release.json`` is
read in one place and checked in one way. Each part is a frozen dataclass (:class:`ReleaseDocument`,
:class:`ReleaseModel`, :class:`Artifact`, :class:`FleetPolicy`, :class:`OtaEntry`); the JSON schema is
generated from them (:func:`schema`) and published beside this module as ``release.schema.json`` (a test
keeps the file equal to the generated one: ``python3 -m provisioner.contracts.release_document`` writes
it). :meth:`ReleaseDocument.from_json` validates a document against that schema, so the station, the
OTA publisher, ``fleet update-os`` and the rehearsal refuse the same things with the same one line, and
:func:`write_release_json` writes only what they would accept.

Every field but ``format`` may be absent: a bare flash bundle and an OTA-only release folder are
releases too. Keys a newer writer adds are kept (``extra``) and written back untouched.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import NoneType, UnionType
from typing import Any

from provisioner.errors import ArtifactError
from provisioner.hashing import SHA256_RE

FORMAT = 1
RELEASE_JSON = "release.json"
SCHEMA_PATH = Path(__file__).with_name("release.schema.json")
#: ``image.ota`` values a manifest may ask for, and ``ota.kind`` in release.json (provisioner.ota).
OTA_KINDS = ("ostree",)
#: the runtimes a release may ship, and the runtime each model kind runs on
RUNTIMES = ("litert_lm", "genie")
MODEL_KINDS = {"litertlm": "litert_lm", "genie": "genie"}

#: a commit id: a sha256 in lowercase hex (ostree-core.c ostree_validate_structureof_checksum_string)
COMMIT_RE = SHA256_RE
#: a ref: OSTREE_REF_REGEXP of ostree's src/libostree/ostree-core.c ("(?:[-._\\w\\d]+/)*[-._\\w\\d]+"), ASCII
#: only and without "." or ".." components (that regexp admits them; a ref is also a path under refs/heads)
REF_RE = re.compile(r"^(?!(?:.*/)?\.\.?(?:/|$))(?:[-._A-Za-z0-9]+/)*[-._A-Za-z0-9]+$")
#: one kernel argument update-os may set: NAME=VALUE, nothing a shell or the BLS options line would split
KARG_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}=[A-Za-z0-9_.,:/+=-]{0,200}$")
#: a path inside the release folder: relative, without a ".." part
INSIDE_RE = re.compile(r"^(?!/)(?!(?:.*/)?\.\.(?:/|$)).+$")
HINT = "rebuild the release with `provisioner build`"


def _rule(description: str, **keywords: Any) -> dict[str, Any]:
    """Field metadata: schema keywords beyond the type, and what a value must be (the error's words)."""
    return {"schema": {"description": description, **keywords}}


@dataclass(frozen=True)
class Artifact:
    """One bundle file: path relative to the bundle folder, sha256, size in bytes."""

    path: str
    sha256: str
    size: int = field(metadata=_rule("a size in bytes", minimum=0))

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "sha256": self.sha256, "size": self.size}

    as_dict = to_json


@dataclass(frozen=True)
class ReleaseModel:
    """One entry of release.json ``models``: what a board must serve and the floors it must meet.

    ``version`` names the on-board version folder; ``min_decode_tok_s``/``max_ttft_s`` are the
    verify floors the manifest's threshold rule gave at build time (None: no reference figure).
    """

    name: str
    kind: str = field(metadata=_rule("a model kind", enum=sorted(MODEL_KINDS)))
    runtime: str = field(metadata=_rule("a runtime", enum=list(RUNTIMES)))
    qairt: str
    chat_template: str
    file: str | None
    sha256: str | None
    size: int | None = field(metadata=_rule("a size in bytes", minimum=0))
    version: str
    min_decode_tok_s: float | None = None
    max_ttft_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    as_dict = to_json


@dataclass(frozen=True)
class FleetPolicy:
    """What the station and the fleet need of the manifest beyond models: the host name rule, how far a
    board may fall below its factory baseline and the eval gate of fleet deploy / update-os.

    ``eval`` is the manifest's ``verify.eval`` with the suite's data itself (suite, source, min_score), so
    the release folder carries what update-os gates on wherever it is copied; its inside is the eval
    suite's format, checked by :func:`provisioner.fleet.eval.from_vars` where it is used.
    """

    hostname: str | None = None
    baseline_max_drop: float | None = None
    eval: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        if self.eval is None:           # written only with a gate, as before
            del out["eval"]
        return out


@dataclass(frozen=True)
class OtaEntry:
    """release.json ``ota``: one release's OSTree commit (what it is: :mod:`provisioner.ota`).

    Every field that reaches the boards or Ansible has the one shape it may have, or the release is
    refused before anything runs. ``kargs`` are the kernel arguments NAME=VALUE the release sets:
    ``OSTREE_KERNEL_ARGS`` reach the first deployment only (meta-updater @ f0e1ccaf
    classes/image_types_ota.bbclass:82-95), and ``ostree admin deploy`` copies the running deployment's
    arguments unless given ``--karg`` (ostree v2026.1 src/ostree/ot-admin-builtin-deploy.c:169-200), so a
    release that changes one (download_mode, sota_qcom.bbclass:12 KERNEL_CMDLINE_EXTRA) carries it.
    """

    kind: str = field(metadata=_rule("an OTA kind", enum=list(OTA_KINDS)))
    tarball: str = field(metadata=_rule("a path inside the release folder", pattern=INSIDE_RE.pattern))
    sha256: str = field(metadata=_rule("a sha256 (64 hex digits)", pattern=SHA256_RE.pattern))
    branch: str = field(metadata=_rule("an OSTree ref name", pattern=REF_RE.pattern, maxLength=255))
    commit: str = field(metadata=_rule("an OSTree commit id (64 hex digits)", pattern=COMMIT_RE.pattern))
    size: int | None = field(default=None, metadata=_rule("a size in bytes", minimum=0))
    content_size: int | None = field(default=None, metadata=_rule("a size in bytes", minimum=0))
    version: str | None = None
    subject: str | None = None
    kargs: tuple[str, ...] = field(default=(), metadata={"items": _rule(
        "a NAME=VALUE kernel argument", pattern=KARG_RE.pattern)})

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "kargs": list(self.kargs)}

    @classmethod
    def from_json(cls, raw: Any, where: Path | str) -> OtaEntry:
        """An ``ota`` entry on its own (a build checks what it collected before writing it)."""
        check(raw, where, part="OtaEntry", prefix="ota")
        return _from_json(cls, raw)


@dataclass(frozen=True)
class ReleaseDocument:
    """The whole ``release.json`` (``format`` 1); see :mod:`provisioner.contracts.release` for the folder.

    ``qairt`` are the pinned builds, ``bundle`` the flash folder relative to the release, ``artifacts``
    sha256 and size of every bundle file (relative to the bundle folder), ``layers`` repo -> commit,
    ``build`` what the build host recorded (host, timings, sstate, tool versions), ``written`` when.
    """

    format: int = field(default=FORMAT, metadata=_rule("this provisioner's format", const=FORMAT))
    release: str | None = None
    board: str | None = None
    machine: str | None = None
    qli: str | None = None
    image: str | None = None
    qairt: tuple[str, ...] = ()
    runtimes: tuple[str, ...] = ()
    models: tuple[ReleaseModel, ...] = ()
    bundle: str | None = field(default=None, metadata=_rule("a path inside the release folder",
                                                             pattern=INSIDE_RE.pattern))
    artifacts: tuple[Artifact, ...] = ()
    layers: dict[str, str] = field(default_factory=dict)
    build: dict[str, Any] | None = None
    simulated: bool = False
    fleet: FleetPolicy | None = None
    written: str | None = None
    ota: OtaEntry | None = None
    #: keys a newer writer added, kept as read
    extra: dict[str, Any] = field(default_factory=dict, metadata={"json": False})

    def to_json(self) -> dict[str, Any]:
        """The JSON object every writer writes (``ota`` only when there is one, as before)."""
        out: dict[str, Any] = dict(self.extra)
        for f in dataclasses.fields(self):
            if f.metadata.get("json", True):
                out[f.name] = _to_json(getattr(self, f.name))
        if self.ota is None:
            del out["ota"]
        return out

    @classmethod
    def from_json(cls, raw: Any, where: Path | str) -> ReleaseDocument:
        """The document, checked against the schema; anything else is one line naming the field."""
        if not isinstance(raw, Mapping):
            raise ArtifactError(f"{where}: release.json is not a JSON object (a {type(raw).__name__})", HINT)
        if raw.get("format") != FORMAT:
            raise ArtifactError(f"{where}: unsupported release.json format {raw.get('format')!r}",
                                f"expected format {FORMAT}; rebuild with this provisioner")
        check(raw, where)
        return _from_json(cls, raw)

    @property
    def eval_gate(self) -> dict[str, Any] | None:
        """``fleet.eval``, or None (see :class:`FleetPolicy`)."""
        return self.fleet.eval if self.fleet else None

    def ota_entry(self, where: Path | str) -> OtaEntry:
        """``ota``, or the one line a release without an OSTree commit gets."""
        if self.ota is None:
            raise ArtifactError(f"{where}: release has no OSTree commit (release.json has no 'ota')",
                                "set image.ota: ostree in the manifest and build again")
        return self.ota


def _to_json(value: Any) -> Any:
    if hasattr(value, "to_json"):
        return value.to_json()
    if isinstance(value, tuple):
        return [_to_json(v) for v in value]
    if isinstance(value, dict):
        return {k: _to_json(v) for k, v in value.items()}
    return value


def _from_json(cls: type, raw: Mapping[str, Any]) -> Any:
    """A dataclass from an already validated object; keys it does not know go to ``extra`` if it has one."""
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    names = set()
    for f in dataclasses.fields(cls):
        names.add(f.name)
        if f.name in raw and f.metadata.get("json", True):
            kwargs[f.name] = _value(hints[f.name], raw[f.name])
    if "extra" in names:
        kwargs["extra"] = {k: v for k, v in raw.items() if k not in names}
    return cls(**kwargs)


def _value(tp: Any, value: Any) -> Any:
    if value is None:
        return None
    inner = _non_null(tp)
    if dataclasses.is_dataclass(inner):
        return _from_json(inner, value)
    if typing.get_origin(inner) is tuple:
        (item, _) = typing.get_args(inner)
        return tuple(_value(item, v) for v in value)
    if typing.get_origin(inner) is dict:
        return dict(value)
    if inner is float:
        return float(value)
    return value


def _non_null(tp: Any) -> Any:
    if typing.get_origin(tp) in (UnionType, typing.Union):
        (inner,) = [a for a in typing.get_args(tp) if a is not NoneType]
        return inner
    return tp


# -- the schema, generated from the dataclasses ---------------------------------------------------

_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _type_schema(tp: Any, rule: Mapping[str, Any]) -> dict[str, Any]:
    nullable = typing.get_origin(tp) in (UnionType, typing.Union)
    inner = _non_null(tp)
    if dataclasses.is_dataclass(inner):
        out: dict[str, Any] = {"$ref": f"#/$defs/{inner.__name__}"}
        return {"anyOf": [out, {"type": "null"}]} if nullable else out
    if typing.get_origin(inner) is tuple:
        (item, _) = typing.get_args(inner)
        out = {"type": "array", "items": _type_schema(item, rule.get("items", {}))}
    elif typing.get_origin(inner) is dict:
        (_, value) = typing.get_args(inner)
        out = {"type": "object"}
        if value is not Any:
            out["additionalProperties"] = _type_schema(value, {})
    else:
        out = {"type": _JSON_TYPES[inner], **rule.get("schema", {})}
        if nullable:
            out["type"] = [out["type"], "null"]
        return out
    return {"anyOf": [out, {"type": "null"}]} if nullable else out


def _object_schema(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    props, required = {}, []
    for f in dataclasses.fields(cls):
        if not f.metadata.get("json", True):
            continue
        props[f.name] = _type_schema(hints[f.name], f.metadata)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.append(f.name)
    out: dict[str, Any] = {"type": "object", "description": " ".join((cls.__doc__ or "").split("\n\n")[0].split()),
                           "properties": props}
    if required:
        out["required"] = required
    return out


def schema() -> dict[str, Any]:
    """The JSON schema of ``release.json`` (draft 2020-12), from the dataclasses above."""
    top = _object_schema(ReleaseDocument)
    top["required"] = ["format"]
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "release.schema.json",
            "title": "edge-llm release.json", **top,
            "$defs": {c.__name__: _object_schema(c) for c in (ReleaseModel, Artifact, FleetPolicy, OtaEntry)}}


@cache
def _validator(part: str | None) -> Any:
    import jsonschema

    published = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    if part is not None:
        published = {"$ref": f"#/$defs/{part}", "$defs": published["$defs"]}
    return jsonschema.Draft202012Validator(published)


def check(raw: Any, where: Path | str, *, part: str | None = None, prefix: str = "") -> None:
    """Validate against the published schema (or one of its ``$defs``); the first problem is one line
    naming the field."""
    import jsonschema

    err = jsonschema.exceptions.best_match(_validator(part).iter_errors(raw))
    if err is None:
        return
    path = ".".join([prefix] * bool(prefix) + [str(p) for p in err.absolute_path])
    if err.validator == "required":
        missing = err.message.split("'")[1] if "'" in err.message else err.message
        raise ArtifactError(f"{where}: release.json '{path}' has no {missing}" if path else
                            f"{where}: release.json has no '{missing}'", HINT)
    what = err.schema.get("description") if isinstance(err.schema, Mapping) else None
    if err.validator == "type":
        types = err.validator_value if isinstance(err.validator_value, list) else [err.validator_value]
        what = "a JSON " + " or ".join(types)
    elif err.validator == "anyOf":          # the schema's only anyOf: an optional object
        what = "a JSON object or null"
    elif not what:
        what = f"within {err.validator} {err.validator_value!r:.60}"
    raise ArtifactError(f"{where}: release.json '{path}' is not {what}: {err.instance!r:.80}", HINT)


# -- the one reader and the one writer of the file ------------------------------------------------

def read_release_json(folder: Path) -> ReleaseDocument:
    """``<folder>/release.json``, read and checked."""
    path = Path(folder) / RELEASE_JSON
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ArtifactError(f"{folder}: no {RELEASE_JSON}", "give the release folder `build` wrote") from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ArtifactError(f"{path}: unreadable release.json ({exc})",
                            "rebuild the release or restore the file") from exc
    return ReleaseDocument.from_json(raw, path)


def write_release_json(folder: Path, doc: ReleaseDocument) -> Path:
    """Write ``<folder>/release.json`` atomically (a reader never sees half a file), checked as read."""
    path = Path(folder) / RELEASE_JSON
    data = doc.to_json()
    check(data, path)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


if __name__ == "__main__":
    print(json.dumps(schema(), indent=2, sort_keys=True))
