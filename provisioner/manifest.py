"""The release manifest: the one YAML file a release engineer writes.

``load_manifest`` parses and validates it, collecting *every* problem with its location
(``models[0].qairt``) and a fix, so a user corrects a manifest in one pass. Checks that need to
look inside model files live in :mod:`provisioner.check`; this module only needs the catalog.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provisioner import catalog
from provisioner.contracts import inventory, memlock
from provisioner.contracts.release import MODEL_KINDS, OTA_KINDS, RUNTIMES
from provisioner.errors import ManifestError, UserError
from provisioner.eval.suite import DEFAULT as DEFAULT_SUITE
from provisioner.eval.suite import Suite, SuiteError, load_suite
from provisioner.yamlsafe import YamlError, load_yaml

MANIFEST_VERSION = 1
LOGIN_POLICIES = ("disabled", "keys-only", "debug")
VARIANTS = ("production", "debug")
ENGINES = ("docker", "podman")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
# useradd's portable name rule (shadow-utils: at most 32 chars, lowercase start)
USER_RE = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
# The inference service must not run as root (or another system account): it would own the NPU with
# every privilege, and edge-llm-user's `useradd --system` of an existing account fails the build.
RESERVED_USERS = frozenset({"root", "daemon", "bin", "sys", "nobody", "sshd", "messagebus", "systemd-network"})
SSH_KEY_RE = re.compile(r"^(ssh-(ed25519|rsa|dss)|ecdsa-sha2-nistp\d+|sk-ssh-ed25519@openssh.com) [A-Za-z0-9+/=]+")

TOP_KEYS = {"manifest", "release", "board", "qli", "qairt", "runtimes", "models", "image", "build", "verify",
            "hostname"}
MODEL_KEYS = {"name", "kind", "path", "url", "sha256", "size", "qairt", "runtime", "reference", "chat_template"}
IMAGE_KEYS = {"variant", "memlock", "download_mode", "root_login", "ssh_authorized_keys", "inference_user",
              "extra_packages", "ota"}
BUILD_KEYS = {"engine", "work_dir", "build_dir", "dl_dir", "sstate_dir", "repo_ref_dir", "sstate_mirrors",
              "hashserve", "hashserve_upstream", "threads", "parallel_make", "mirrors", "ssh_dir",
              "container_image"}
VERIFY_KEYS = {"prompt", "max_tokens", "min_decode_tok_s", "max_ttft_s", "os", "tolerance", "baseline_max_drop",
               "eval"}



@dataclass(frozen=True)
class Problem:
    """One manifest problem: where, what, and how to fix it."""

    location: str
    message: str
    fix: str = ""

    def __str__(self) -> str:
        text = f"{self.location}: {self.message}"
        return f"{text} -> {self.fix}" if self.fix else text


@dataclass(frozen=True)
class Model:
    """A model the release ships: a ``.litertlm`` file or a Genie bundle (directory/archive)."""

    name: str
    kind: str
    runtime: str
    qairt: str
    path: Path | None = None
    url: str | None = None
    sha256: str | None = None
    size: int | None = None
    reference: str | None = None
    chat_template: str | None = None

    @property
    def filename(self) -> str:
        """File name the artifact has on disk and in DL_DIR."""
        if self.path is not None:
            return self.path.name
        assert self.url is not None
        return self.url.rstrip("/").rsplit("/", 1)[-1].split("?", 1)[0]


@dataclass(frozen=True)
class ImagePolicy:
    variant: str = "production"
    memlock: str = "unlimited"
    download_mode: int = 0
    root_login: str = "disabled"
    ssh_authorized_keys: tuple[str, ...] = ()
    inference_user: str = "llm"
    extra_packages: tuple[str, ...] = ()
    ota: str | None = None          # 'ostree': QLI's qcom-distro-sota flavour (provisioner.ota)


@dataclass(frozen=True)
class BuildSettings:
    engine: str | None = None
    work_dir: Path | None = None
    build_dir: Path | None = None
    dl_dir: Path | None = None
    sstate_dir: Path | None = None
    repo_ref_dir: Path | None = None
    sstate_mirrors: tuple[str, ...] = ()
    hashserve: str | None = None
    hashserve_upstream: str | None = None
    threads: int | None = None
    parallel_make: int | None = None
    mirrors: tuple[str, ...] = ()
    ssh_dir: Path | None = None
    container_image: str | None = None


@dataclass(frozen=True)
class VerifyThresholds:
    prompt: str = inventory.SMOKE_PROMPT
    max_tokens: int = inventory.SMOKE_MAX_TOKENS
    min_decode_tok_s: float | None = None
    max_ttft_s: float | None = None
    os: str = "qli"
    tolerance: float = inventory.DEFAULT_TOLERANCE
    baseline_max_drop: float = inventory.DEFAULT_BASELINE_MAX_DROP
    eval: EvalGate | None = None


@dataclass(frozen=True)
class EvalGate:
    """``verify.eval``: the suite each board's models must answer, and the score a new model or image must
    keep there (``fleet deploy`` / ``fleet update-os`` roll back below it)."""

    suite: Suite
    min_score: float


@dataclass(frozen=True)
class Manifest:
    """A validated release manifest. Paths are absolute (resolved against the manifest's folder)."""

    path: Path
    release: str
    board: catalog.Board
    qli: str
    qairt: tuple[str, ...]
    runtimes: tuple[str, ...]
    models: tuple[Model, ...]
    image: ImagePolicy = field(default_factory=ImagePolicy)
    build: BuildSettings = field(default_factory=BuildSettings)
    verify: VerifyThresholds = field(default_factory=VerifyThresholds)
    hostname: str = inventory.DEFAULT_HOSTNAME_RULE     # fleet host name of a board from its serial
    warnings: tuple[Problem, ...] = ()
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def thresholds(self, model: Model) -> tuple[float | None, float | None]:
        """(decode floor, TTFT ceiling) for ``model``: the verify section on the catalog's reference figures."""
        v = self.verify
        return inventory.model_thresholds(self.board, model.reference or model.name, os_name=v.os,
                                          tolerance=v.tolerance, min_decode_tok_s=v.min_decode_tok_s,
                                          max_ttft_s=v.max_ttft_s)

    def min_decode_tok_s(self, model: Model) -> float | None:
        """Decode floor for ``model``: explicit threshold, else catalog reference x tolerance."""
        return self.thresholds(model)[0]

    def max_ttft_s(self, model: Model) -> float | None:
        """TTFT ceiling for ``model``: explicit threshold, else from the catalog reference."""
        return self.thresholds(model)[1]


class _Collector:
    """Gathers problems while walking the raw YAML."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self.warnings: list[Problem] = []

    def warn(self, location: str, message: str, fix: str = "") -> None:
        self.warnings.append(Problem(location, message, fix))

    def add(self, location: str, message: str, fix: str = "") -> None:
        self.problems.append(Problem(location, message, fix))

    def unknown_keys(self, data: dict, allowed: set[str], where: str) -> None:
        for key in data:
            if key not in allowed:
                close = _closest(str(key), allowed)
                fix = f"did you mean '{close}'?" if close else f"allowed keys: {', '.join(sorted(allowed))}"
                self.add(f"{where}{key}" if not where else f"{where}.{key}", "unknown key", fix)


def _closest(word: str, options: set[str]) -> str | None:
    import difflib

    found = difflib.get_close_matches(word, sorted(options), n=1, cutoff=0.6)
    return found[0] if found else None


def read_yaml(path: Path) -> Any:
    """Read a YAML file, turning every I/O or syntax failure into one-line ManifestError."""
    if not path.exists():
        raise ManifestError(f"{path}: no such file", "check the path, or start from examples/*.yaml")
    if path.is_dir():
        raise ManifestError(f"{path}: is a directory, not a manifest file", "pass the .yaml file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{path}: cannot read: {exc}", "check permissions and encoding (UTF-8)") from exc
    if not text.strip():
        raise ManifestError(f"{path}: manifest is empty", "start from examples/*.yaml")
    try:
        return load_yaml(text, str(path))
    except YamlError as exc:
        raise ManifestError(exc.message, exc.hint) from None


def load_manifest(path: str | Path) -> Manifest:
    """Parse and validate a manifest; raise ManifestError listing every problem found."""
    path = Path(path).resolve()
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ManifestError(f"{path}: top level must be a mapping (key: value)", "start from examples/*.yaml")
    manifest, problems = _validate(path, data)
    if problems:
        n = len(problems)
        head = f"{path.name}: {n} problem{'s' if n > 1 else ''}: " + "; ".join(str(p) for p in problems)
        raise ManifestError(head, None, problems)
    assert manifest is not None
    return manifest


def _validate(path: Path, data: dict[str, Any]) -> tuple[Manifest | None, list[Problem]]:
    c = _Collector()
    c.unknown_keys(data, TOP_KEYS, "")
    base = path.parent

    version = data.get("manifest", MANIFEST_VERSION)
    if version != MANIFEST_VERSION:
        c.add("manifest", f"unsupported manifest format {version!r}", f"set 'manifest: {MANIFEST_VERSION}'")

    release = data.get("release")
    if not isinstance(release, str) or not NAME_RE.match(release or ""):
        c.add("release", "missing or invalid release id",
              "set e.g. 'release: gemma4-e2b-2026.11' (lowercase, digits, . _ -); it becomes the image BUILD_ID")
        release = "invalid"

    board = None
    board_raw = data.get("board")
    if not board_raw:
        c.add("board", "missing", f"set one of: {', '.join(sorted(catalog.boards()))}")
    else:
        try:
            board = catalog.board(str(board_raw))
        except Exception as exc:  # UserError from the catalog
            c.add("board", str(getattr(exc, "message", exc)), getattr(exc, "hint", "") or "")

    qli = str(data.get("qli", "qli-2.0"))
    rel = catalog.releases().get(qli)
    if rel is None:
        c.add("qli", f"unknown QLI release '{qli}'", f"use one of: {', '.join(sorted(catalog.releases()))}")
    elif board is not None and board.id not in rel.machines:
        c.add("board", f"{board.id} is not supported by {qli}", f"{qli} supports: {', '.join(rel.machines)}")

    qairt_raw = data.get("qairt")
    if isinstance(qairt_raw, str):
        qairt_raw = [qairt_raw]
    qairt: list[str] = []
    if not qairt_raw or not isinstance(qairt_raw, list):
        c.add("qairt", "missing", "list the exact QAIRT build(s) the models need, e.g. ['2.44.0.260225']")
    else:
        known = catalog.qairt_catalog()["versions"]
        for i, v in enumerate(qairt_raw):
            v = str(v)
            if not catalog.is_qairt_build(v):
                c.add(f"qairt[{i}]", f"'{v}' is not a full QAIRT build id",
                      "use the 4-part build, e.g. 2.44.0.260225 (read it with `provisioner inspect MODEL`)")
            elif v not in known:
                c.add(f"qairt[{i}]", f"QAIRT {v} is not known to this provisioner",
                      f"use one of {', '.join(k for k, s in known.items() if s['status'] == 'supported')}, "
                      "or add a recipe + catalog entry")
            elif known[v]["status"] != "supported":
                c.add(f"qairt[{i}]", f"QAIRT {v} is the QLI system SDK, not a model runtime",
                      "pin the build your model was compiled with")
            qairt.append(v)

    runtimes_raw = data.get("runtimes")
    runtimes: list[str] = []
    if runtimes_raw is not None:
        if isinstance(runtimes_raw, str):
            runtimes_raw = [runtimes_raw]
        for i, r in enumerate(runtimes_raw or []):
            if r not in RUNTIMES:
                c.add(f"runtimes[{i}]", f"unknown runtime '{r}'", f"use one of: {', '.join(RUNTIMES)}")
            else:
                runtimes.append(r)

    models: list[Model] = []
    models_raw = data.get("models")
    if not models_raw or not isinstance(models_raw, list):
        c.add("models", "missing or empty", "list at least one model with name, kind, path or url, qairt")
    else:
        names: set[str] = set()
        for i, m in enumerate(models_raw):
            model = _model(c, f"models[{i}]", m, base, board, qairt)
            if model is None:
                continue
            if model.name in names:
                c.add(f"models[{i}].name", f"duplicate model name '{model.name}'", "give every model its own name")
            names.add(model.name)
            models.append(model)
    if runtimes_raw is None:
        runtimes = sorted({m.runtime for m in models})
    else:
        for i, m in enumerate(models):
            if m.runtime not in runtimes and m.runtime in RUNTIMES:
                c.add(f"models[{i}].runtime", f"needs runtime '{m.runtime}' which 'runtimes' does not list",
                      f"add '{m.runtime}' to runtimes")
    for i, v in enumerate(qairt):
        if models and not any(m.qairt == v for m in models):
            c.add(f"qairt[{i}]", f"QAIRT {v} is pinned but no model uses it", "remove it (it only costs image space)")

    image = _image(c, data.get("image") or {})
    build = _build(c, data.get("build") or {}, base)
    verify = _verify(c, data.get("verify") or {}, base)
    hostname = str(data.get("hostname") or inventory.DEFAULT_HOSTNAME_RULE)
    try:
        inventory.check_hostname_rule(hostname)
    except UserError as exc:
        c.add("hostname", exc.message, exc.hint or "")

    if c.problems or board is None:
        return None, c.problems
    return (
        Manifest(path=path, release=release, board=board, qli=qli, qairt=tuple(qairt), runtimes=tuple(runtimes),
                 models=tuple(models), image=image, build=build, verify=verify, hostname=hostname,
                 warnings=tuple(c.warnings), raw=data),
        [],
    )


def _model(c: _Collector, where: str, m: Any, base: Path, board: catalog.Board | None,
           qairt: list[str]) -> Model | None:
    if not isinstance(m, dict):
        c.add(where, "must be a mapping", "give name, kind, path or url, qairt")
        return None
    c.unknown_keys(m, MODEL_KEYS, where)
    name = m.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        c.add(f"{where}.name", "missing or invalid", "use lowercase letters, digits, . _ -")
        name = f"model{where}"
    kind = m.get("kind")
    if kind not in MODEL_KINDS:
        c.add(f"{where}.kind", f"unknown kind {kind!r}", f"use one of: {', '.join(MODEL_KINDS)}")
        kind = "litertlm"
    runtime = m.get("runtime", MODEL_KINDS[kind])
    if runtime != MODEL_KINDS[kind]:
        c.add(f"{where}.runtime", f"a {kind} model runs with '{MODEL_KINDS[kind]}', not '{runtime}'",
              f"set runtime: {MODEL_KINDS[kind]} or drop the key")
    path = m.get("path")
    url = m.get("url")
    if not path and not url:
        c.add(where, "neither 'path' nor 'url' given", "set path (local file/folder) or url (to fetch)")
    if url is not None and not re.match(r"^(https?|file)://", str(url)):
        c.add(f"{where}.url", f"unsupported URL '{url}'", "use http(s):// or file://")
    sha = m.get("sha256")
    if sha is not None and not SHA256_RE.match(str(sha).lower()):
        c.add(f"{where}.sha256", "not a sha256 (64 hex digits)", "copy it from `provisioner inspect --hash`")
    if url and not sha:
        c.warn(f"{where}.sha256", "not set: a corrupt or truncated download can only be caught by size",
               "add the publisher's sha256 (`provisioner inspect --hash FILE`)")
    size = m.get("size")
    if size is not None and (not isinstance(size, int) or size <= 0):
        c.add(f"{where}.size", f"must be a positive byte count, got {size!r}", "e.g. size: 3294593024")
        size = None
    mq = m.get("qairt")
    if mq is None:
        c.add(f"{where}.qairt", "missing", "set the exact QAIRT build the model was compiled with "
              "(`provisioner inspect MODEL` reads it)")
        mq = ""
    else:
        mq = str(mq)
        if not catalog.is_qairt_build(mq):
            c.add(f"{where}.qairt", f"'{mq}' is not a full QAIRT build id", "use e.g. 2.44.0.260225")
        elif qairt and mq not in qairt:
            c.add(f"{where}.qairt", f"model needs QAIRT {mq} but the manifest pins {', '.join(qairt)}",
                  f"add {mq} to 'qairt' (each model runs with its exact build)")
    reference = m.get("reference", name if name in catalog.models() else None)
    if reference is not None and reference not in catalog.models():
        c.add(f"{where}.reference", f"unknown reference model '{reference}'",
              f"use one of: {', '.join(sorted(catalog.models()))} or drop it")
        reference = None
    if reference and board is not None:
        info = catalog.models()[reference]
        if info.boards and board.id not in info.boards:
            c.add(where, f"{reference} is built for {', '.join(info.boards)}, not {board.id}",
                  "use the model export for this board's SoC")
        if mq and info.qairt != mq and catalog.is_qairt_build(mq):
            c.add(f"{where}.qairt", f"{reference} is compiled for QAIRT {info.qairt}, not {mq}",
                  f"set qairt: {info.qairt}")
    return Model(
        name=name, kind=kind, runtime=MODEL_KINDS[kind], qairt=mq,
        path=(base / str(path)).resolve() if path else None, url=str(url) if url else None,
        sha256=str(sha).lower() if sha else None, size=size, reference=reference,
        chat_template=m.get("chat_template"),
    )


def _image(c: _Collector, d: Any) -> ImagePolicy:
    if not isinstance(d, dict):
        c.add("image", "must be a mapping", "see examples/*.yaml")
        return ImagePolicy()
    c.unknown_keys(d, IMAGE_KEYS, "image")
    variant = d.get("variant", "production")
    if variant not in VARIANTS:
        c.add("image.variant", f"unknown variant {variant!r}", "use production or debug")
    policy = str(d.get("memlock", memlock.DEFAULT_POLICY))
    try:
        limit = memlock.limits(policy).bytes
    except ValueError:
        c.add("image.memlock", f"'{policy}' is not 'unlimited' or a KiB count",
              "use 'unlimited' (FastRPC must pin ~1.17 GB for Gemma-4 E2B)")
    else:
        if limit is not None and limit < memlock.MIN_BYTES:
            c.add("image.memlock", f"{policy} KiB is below the ~1.17 GB FastRPC pins",
                  "use 'unlimited' (8 MB gives 'Could not allocate persistent weights buffer!')")
    dm = d.get("download_mode", 0 if variant == "production" else 1)
    if dm not in (0, 1):
        c.add("image.download_mode", f"must be 0 or 1, got {dm!r}",
              "0 (production: a cDSP fault reboots) or 1 (debug: EDL ramdump)")
        dm = 0
    login = d.get("root_login", "disabled" if variant == "production" else "debug")
    if login not in LOGIN_POLICIES:
        c.add("image.root_login", f"unknown policy {login!r}", f"use one of: {', '.join(LOGIN_POLICIES)}")
    if variant == "production" and login == "debug":
        c.add("image.root_login", "a production image must not allow empty/default root passwords",
              "use keys-only (with ssh_authorized_keys) or disabled, or set variant: debug")
    keys = d.get("ssh_authorized_keys", []) or []
    if not isinstance(keys, list):
        c.add("image.ssh_authorized_keys", "must be a list of public keys", "one 'ssh-ed25519 AAAA...' per item")
        keys = []
    for i, k in enumerate(keys):
        if "PRIVATE KEY" in str(k):
            c.add(f"image.ssh_authorized_keys[{i}]", "this is a PRIVATE key", "never put private keys in a manifest; "
                  "use the .pub file")
        elif any(ord(ch) < 32 and ch != "\t" for ch in str(k)):
            # local.conf is line-based: a raw newline would end the value and start a new line
            c.add(f"image.ssh_authorized_keys[{i}]", "contains a line break or control character",
                  "one key per list item, each on one line (no YAML '|' block)")
        elif any(ch in str(k) for ch in "\"'\\") or "${" in str(k):
            c.add(f"image.ssh_authorized_keys[{i}]", "contains quotes, backslashes or '${'",
                  "use the plain one-line public key")
        elif not SSH_KEY_RE.match(str(k)):
            c.add(f"image.ssh_authorized_keys[{i}]", "not an OpenSSH public key", "paste a line of ~/.ssh/id_*.pub")
    if login == "keys-only" and not keys:
        c.add("image.ssh_authorized_keys", "root_login is keys-only but no key is given",
              "add at least one public key or you will be locked out")
    user = str(d.get("inference_user", "llm"))
    if user in RESERVED_USERS:
        c.add("image.inference_user", f"{user!r} is a system account",
              "use a dedicated unprivileged user (e.g. llm); it only needs group fastrpc")
    elif not USER_RE.match(user):
        c.add("image.inference_user", f"{user!r} is not a valid Linux user name",
              "use lowercase letters, digits, '_' or '-' (e.g. llm)")
    ota = d.get("ota")
    if ota is not None and ota not in OTA_KINDS:
        c.add("image.ota", f"unknown OTA kind {ota!r}",
              "use 'ostree' (QLI's qcom-distro-sota flavour) or leave it unset")
    # 'ostree' builds DISTRO qcom-distro-sota (plan.SOTA_INCLUDE). meta-updater empties /opt in the commit
    # (uptane/meta-updater f0e1ccaf image_types_ostree.bbclass); meta-edge-llm's edge-llm-opt.bbclass
    # installs QAIRT, the runtime and the models under /usr for sota and links /opt to them at boot, and
    # the image fails if anything else is left in /opt. Both variants and login policies work with it.
    return ImagePolicy(variant=variant, memlock=policy, download_mode=int(dm), root_login=login,
                       ssh_authorized_keys=tuple(str(k) for k in keys), inference_user=user,
                       extra_packages=tuple(d.get("extra_packages", []) or []), ota=ota)


def _build(c: _Collector, d: Any, base: Path) -> BuildSettings:
    if not isinstance(d, dict):
        c.add("build", "must be a mapping", "see examples/*.yaml")
        return BuildSettings()
    c.unknown_keys(d, BUILD_KEYS, "build")
    engine = d.get("engine")
    if engine is not None and engine not in ENGINES:
        c.add("build.engine", f"unknown container engine {engine!r}", "use docker or podman")

    def p(key: str) -> Path | None:
        v = d.get(key)
        return (base / str(v)).resolve() if v else None

    for key in ("threads", "parallel_make"):
        v = d.get(key)
        if v is not None and (not isinstance(v, int) or v <= 0):
            c.add(f"build.{key}", f"must be a positive integer, got {v!r}", "e.g. 16")
    mirrors = d.get("sstate_mirrors", []) or []
    if isinstance(mirrors, str):
        mirrors = [mirrors]
    for i, mirror in enumerate(mirrors):
        if not re.match(r"^(https?|file)://", str(mirror)):
            c.add(f"build.sstate_mirrors[{i}]", f"unsupported mirror '{mirror}'", "use http(s):// or file:///path")
    hs = d.get("hashserve")
    if hs is not None and not (hs == "auto" or re.match(r"^(unix://.+|[\w.\-]+:\d+|wss?://.+)$", str(hs))):
        c.add("build.hashserve", f"'{hs}' is not auto, host:port or unix://path", "e.g. hashserv.lan:8686")
    for i, mirror in enumerate(d.get("mirrors", []) or []):
        if not re.match(r"^(https?|file)://", str(mirror)):
            c.add(f"build.mirrors[{i}]", f"unsupported mirror '{mirror}'", "use http(s):// or file:///path")
    return BuildSettings(
        engine=engine, work_dir=p("work_dir"), build_dir=p("build_dir"), dl_dir=p("dl_dir"),
        sstate_dir=p("sstate_dir"), repo_ref_dir=p("repo_ref_dir"), sstate_mirrors=tuple(mirrors),
        hashserve=hs, hashserve_upstream=d.get("hashserve_upstream"), threads=d.get("threads"),
        parallel_make=d.get("parallel_make"), mirrors=tuple(d.get("mirrors", []) or []), ssh_dir=p("ssh_dir"),
        container_image=d.get("container_image"),
    )


def _verify(c: _Collector, d: Any, base: Path) -> VerifyThresholds:
    if not isinstance(d, dict):
        c.add("verify", "must be a mapping", "see examples/*.yaml")
        return VerifyThresholds()
    c.unknown_keys(d, VERIFY_KEYS, "verify")
    out = VerifyThresholds()
    kwargs: dict[str, Any] = {}
    for key in ("min_decode_tok_s", "max_ttft_s", "tolerance"):
        if key in d:
            v = d[key]
            if not isinstance(v, int | float) or v <= 0:
                c.add(f"verify.{key}", f"must be a positive number, got {v!r}", "e.g. 25")
            else:
                kwargs[key] = float(v)
    if "baseline_max_drop" in d:
        v = d["baseline_max_drop"]
        if not isinstance(v, int | float) or isinstance(v, bool) or not 0 < v < 1:
            c.add("verify.baseline_max_drop", f"must be a fraction between 0 and 1, got {v!r}",
                  "e.g. 0.1 (a board may run 10 % below its factory baseline)")
        else:
            kwargs["baseline_max_drop"] = float(v)
    if "max_tokens" in d:
        if not isinstance(d["max_tokens"], int) or not 1 <= d["max_tokens"] <= 4096:
            c.add("verify.max_tokens", "must be an integer 1..4096", "e.g. 128")
        else:
            kwargs["max_tokens"] = d["max_tokens"]
    if "prompt" in d:
        kwargs["prompt"] = str(d["prompt"])
    if "eval" in d:
        kwargs["eval"] = _eval(c, d["eval"], base)
    if "os" in d:
        if d["os"] not in ("qli", "ubuntu"):
            c.add("verify.os", f"unknown OS {d['os']!r}", "use qli or ubuntu (selects the reference speed)")
        else:
            kwargs["os"] = d["os"]
    return VerifyThresholds(**{**out.__dict__, **kwargs})


def _eval(c: _Collector, d: Any, base: Path) -> EvalGate | None:  # noqa: ANN401 - any YAML value
    """``verify.eval: {suite: <file, relative to the manifest, or "default">, min_score: 0..1}``."""
    if not isinstance(d, dict):
        c.add("verify.eval", "must be a mapping {suite, min_score}", "e.g. {suite: default, min_score: 0.8}")
        return None
    c.unknown_keys(d, {"suite", "min_score"}, "verify.eval")
    ms = d.get("min_score")
    if isinstance(ms, bool) or not isinstance(ms, int | float) or not 0 <= ms <= 1:
        c.add("verify.eval.min_score", f"must be a number 0..1, got {ms!r}",
              "the share of the suite a model must answer right, e.g. 0.8")
        ms = None
    name = d.get("suite", DEFAULT_SUITE)
    if not isinstance(name, str) or not name:
        c.add("verify.eval.suite", f"must be a file name or '{DEFAULT_SUITE}', got {name!r}", "e.g. evals/agent.yaml")
        return None
    try:
        suite = load_suite(name if name == DEFAULT_SUITE else (base / name))
    except SuiteError as exc:
        for line in exc.problems:
            c.add("verify.eval.suite", line)
        return None
    return EvalGate(suite, float(ms)) if ms is not None else None
