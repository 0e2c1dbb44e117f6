"""`provisioner litert build`: the patched LiteRT-LM runtime tarball the layer packages.

LiteRT-LM is built with Bazel, which needs network and an aarch64 host with clang-18 - far from
what bitbake does well - so the layer's ``litert-lm-runtime`` recipe packages a prebuilt tarball
and this command produces it, reproducibly:

1. clone google-ai-edge/LiteRT-LM at the pinned commit (or reuse ``--source``), ``git lfs pull``;
2. apply patches 1 and 2 (from ``layers/meta-edge-llm/recipes-ai/litert-lm/files``);
3. ``bazel fetch`` the three targets the build names, then patch 3 inside the ``@litert`` external
   (it lives in Bazel's output base);
4. ``bazel build --nofetch`` those three targets (``litert_lm_main``, the Qualcomm dispatch library and
   the C API library ``//python/litert_lm:litert-lm`` that edge-llm-serve binds) with
   ``LITERT_QAIRT_SDK`` the way LiteRT concatenates it;
5. collect the five files, check that each is an aarch64 ELF (not an LFS pointer), and write a
   deterministic tarball + ``.sha256`` under the name the recipe expects.

Patch steps are anchor-checked and idempotent: ``patch -R --dry-run`` succeeding means already
applied; otherwise every changed line ("anchor") must exist in the target file, else one line
names the file and the anchor (the usual cause: another LiteRT-LM/LiteRT commit).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import platform
import re
import shutil
import subprocess
import tarfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provisioner import shipped
from provisioner.contracts import board as on_board
from provisioner.contracts import pins
from provisioner.errors import BuildError
from provisioner.hashing import sha256_file
from provisioner.steps import Step, StepEvent, StepRunner
from provisioner.ui import Reporter

UPSTREAM = pins.LITERT_LM_UPSTREAM
PINNED_COMMIT = pins.LITERT_LM_COMMIT
QAIRT = pins.LITERT_LM_QAIRT
TARGET_MAIN = "//runtime/engine:litert_lm_main"          # runtime/engine/BUILD:199 at cbf463d
TARGET_DISPATCH = "@litert//litert/vendors/qualcomm/dispatch:dispatch_api_so"
# LiteRT-LM's C API as a shared library, which edge-llm-serve binds with ctypes:
# python/litert_lm/BUILD:26-50 at cbf463d97fa3 (cc_binary "litert-lm", linkshared = 1; c/BUILD there
# has only the cc_library targets engine/engine_cpu). Bazel names the output after the rule
# (bazel-bin/python/litert_lm/litert-lm); Google's Python package loads it as liblitert-lm.so
# (python/litert_lm/_ffi.py:104), the name it is shipped under. The pinned commit is public:
# github.com/zkh2016/LiteRT-LM holds cbf463d97fa3 (google-ai-edge/LiteRT-LM's history).
TARGET_CAPI = "//python/litert_lm:litert-lm"
LFS_LIB = "prebuilt/linux_arm64/libGemmaModelConstraintProvider.so"
LFS_POINTER = b"version https://git-lfs.github.com/spec/v1"
EM_AARCH64 = 183
PATCH_DIR = shipped.layer_dir() / "recipes-ai" / "litert-lm" / "files"
# where bazel puts each output (relative to bazel-bin); searched by name if not there
OUTPUTS = {
    "bin/litert_lm_main": ["runtime/engine/litert_lm_main"],
    "lib/libLiteRtDispatch_Qualcomm.so": ["external/litert/litert/vendors/qualcomm/dispatch/"
                                          "libLiteRtDispatch_Qualcomm.so"],
    "lib/libLiteRt.so": ["external/litert/litert/c/libLiteRt.so", "runtime/engine/libLiteRt.so"],
    on_board.LITERT_CAPI_LIB: ["python/litert_lm/litert-lm"],
}


def tarball_name(rev: str = PINNED_COMMIT, qairt: str = QAIRT) -> str:
    """The file name the layer recipe references (LITERT_LM_TARBALL; one rule: contracts.pins)."""
    return pins.litert_tarball(rev, qairt)


@dataclass
class LitertOptions:
    work: Path
    out: Path
    env: Mapping[str, str]          # the run's (the CLI edge passes its RunContext.env)
    qairt_sdk: str | None = None
    source: str | None = None
    rev: str = PINNED_COMMIT
    qairt: str = QAIRT
    patches: Path = PATCH_DIR
    allow_cross: bool = False

    @property
    def src(self) -> Path:
        return self.work / "LiteRT-LM"


@dataclass
class Command:
    """One named action of the build: an external command (``argv``) or a Python action (``fn``).

    It is the job's description; :meth:`LitertBuild.run` turns each into a
    :class:`provisioner.steps.Step` and runs them with the one :class:`~provisioner.steps.StepRunner`.
    """

    name: str
    argv: list[str] | None = None
    cwd: Path | None = None
    fn: Callable[[], str | None] | None = None
    what: str = ""

    def describe(self) -> str:
        if self.argv:
            where = f" (in {self.cwd})" if self.cwd else ""
            return f"{self.name}: $ {' '.join(self.argv)}{where}"
        return f"{self.name}: {self.what}"


@dataclass
class LitertResult:
    tarball: Path
    sha256: str
    files: dict[str, str]          # path in tarball -> sha256

    def as_dict(self) -> dict[str, Any]:
        return {"tarball": str(self.tarball), "sha256": self.sha256, "files": self.files}


# -- checks ----------------------------------------------------------------------------------

def check_host(allow_cross: bool) -> str | None:
    """None on aarch64; otherwise a warning (``allow_cross``) or a BuildError."""
    arch = platform.machine().lower()
    if arch in ("aarch64", "arm64"):
        return None
    msg = (f"this host is {arch}: LiteRT-LM's Linux NPU runtime is built natively on an aarch64 host "
           "(the board's own architecture)")
    if allow_cross:
        return msg + "; --allow-cross given: only for --dry-run and testing, the result is checked for aarch64"
    raise BuildError(msg, "run `provisioner litert build` on an aarch64 machine (e.g. an arm64 cloud VM or the "
                          "EVK itself), or add --dry-run to see the steps")


def qairt_sdk_value(raw: str | None, qairt: str = QAIRT) -> str:
    """LITERT_QAIRT_SDK as LiteRT needs it: absolute, trailing '/', the folder holding qairt/<ver>/.

    LiteRT joins it with ``qairt/<ver>`` by plain concatenation, so a missing slash or the
    version folder itself silently points Bazel at a wrong path.
    """
    if not raw:
        raise BuildError("no QAIRT SDK given for LITERT_QAIRT_SDK",
                         f"pass --qairt-sdk DIR (the folder that contains qairt/{qairt}/) or set LITERT_QAIRT_SDK")
    p = Path(raw).expanduser()
    if p.suffix == ".zip":
        raise BuildError(f"{p}: LiteRT does not accept a .zip for LITERT_QAIRT_SDK (only a folder or .gz)",
                         f"unzip it and pass the folder that contains qairt/{qairt}/")
    p = p.resolve()
    if p.is_file() and p.name.endswith(".gz"):
        return str(p)
    if not p.is_dir():
        raise BuildError(f"QAIRT SDK {p} does not exist", f"download QAIRT {qairt} and unpack it there "
                         "(`provisioner fetch` puts it in DL_DIR)")
    if (p / "qairt" / qairt).is_dir():
        return str(p) + "/"
    if p.name == qairt and p.parent.name == "qairt":
        return str(p.parent.parent) + "/"
    found = sorted(d.name for d in (p / "qairt").iterdir() if d.is_dir()) if (p / "qairt").is_dir() else []
    detail = f" (it has qairt/{', qairt/'.join(found)})" if found else ""
    raise BuildError(f"{p} does not contain qairt/{qairt}/{detail}",
                     f"LiteRT-LM {PINNED_COMMIT[:12]} needs QAIRT exactly {qairt}: pass the folder containing "
                     f"qairt/{qairt}/")


def _tool(name: str, env: Mapping[str, str], hint: str, alternatives: tuple[str, ...] = ()) -> str:
    for n in (name, *alternatives):
        found = shutil.which(n, path=env.get("PATH"))
        if found:
            return found
    raise BuildError(f"'{name}' not found on PATH", hint)


# -- patches ---------------------------------------------------------------------------------

@dataclass
class PatchInfo:
    path: Path
    files: dict[str, list[str]]     # target path (stripped of a/) -> anchor lines (lines the patch changes)


def read_patch(path: Path) -> PatchInfo:
    """Target files and anchors of a unified diff.

    Anchors are the removed lines of each file (the lines the patch changes), else its first
    non-blank context line: a blank context line (patch 3 starts with one) is in every file and
    would name nothing when it is missing.
    """
    removed: dict[str, list[str]] = {}
    context: dict[str, list[str]] = {}
    current: str | None = None
    in_hunk = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("+++ "):
            name = line[4:].split("\t")[0].strip()
            current = name[2:] if name.startswith(("a/", "b/")) else name
            removed.setdefault(current, [])
            context.setdefault(current, [])
            in_hunk = False
        elif line.startswith("@@"):
            in_hunk = True
        elif in_hunk and current is not None:
            if line.startswith("diff ") or line.startswith("--- "):
                in_hunk = False
            elif line.startswith("-"):
                removed[current].append(line[1:])
            elif line.startswith(" ") and line.strip() and not context[current]:
                context[current].append(line[1:])
    if not removed:
        raise BuildError(f"{path}: not a unified diff (no '+++' file header)", "restore the patch from the layer")
    return PatchInfo(path, {f: removed[f] or context[f] for f in removed})


def patch_argv(patch: Path, directory: Path, *, reverse: bool = False, dry_run: bool = False) -> list[str]:
    argv = ["patch", "-p1", "-f", "--fuzz=0", "--no-backup-if-mismatch", "-s", "-d", str(directory), "-i", str(patch)]
    if reverse:
        argv.insert(1, "-R")
    if dry_run:
        argv.insert(1, "--dry-run")
    return argv


def apply_patch(patch: Path, directory: Path) -> str:
    """Apply ``patch`` in ``directory`` once. Returns 'applied' or 'already applied'.

    Decided with ``patch -R --dry-run`` (already applied) and ``patch --dry-run`` (applies);
    when neither works, the first anchor missing from its file is named.
    """
    if not patch.is_file():
        raise BuildError(f"patch {patch} not found", "the layer's recipes-ai/litert-lm/files/ must hold patches 1-3")
    info = read_patch(patch)
    if _dry_run_exact(patch_argv(patch, directory, reverse=True, dry_run=True)):
        return "already applied"
    for rel, anchors in info.files.items():
        target = directory / rel
        if not target.is_file():
            raise BuildError(f"{patch.name}: {rel} not found in {directory}",
                             f"LiteRT-LM must be at {PINNED_COMMIT[:12]} (another commit moved the file)")
        text = {ln.rstrip() for ln in target.read_text(encoding="utf-8", errors="replace").splitlines()}
        for anchor in anchors:
            if anchor.rstrip() not in text:
                raise BuildError(f"{patch.name}: anchor '{anchor.strip()}' not found in {rel}",
                                 f"the source is not LiteRT-LM {PINNED_COMMIT[:12]} / LiteRT d865fd82; "
                                 "check out the pinned commit or update the patch")
    if not _dry_run_exact(patch_argv(patch, directory, dry_run=True)):
        files = ", ".join(info.files)
        raise BuildError(f"{patch.name}: does not apply to {files} (anchors found but at other lines)",
                         "check out the pinned commit or regenerate the patch")
    r = subprocess.run(patch_argv(patch, directory), capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise BuildError(f"{patch.name}: patch failed: {(r.stdout + r.stderr).strip().splitlines()[-1:]}",
                         "inspect the source tree")
    return "applied"


def _dry_run_exact(argv: list[str]) -> bool:
    """True when a ``patch --dry-run`` applies every hunk exactly where the patch says.

    The layer's patches carry zero-context hunks anchored on line numbers; GNU patch would
    happily apply one at an offset (another ``#if defined(__ANDROID__)`` further down), which
    is exactly the silent mistake the anchors are there to prevent.
    """
    r = subprocess.run([a for a in argv if a != "-s"], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    out = r.stdout + r.stderr
    return r.returncode == 0 and "offset" not in out and "fuzz" not in out


def find_patches(directory: Path) -> list[Path]:
    """Patches 0001..0003 from the layer (by number, whatever their titles)."""
    out = []
    for n in (1, 2, 3):
        found = sorted(directory.glob(f"{n:04d}-*.patch"))
        if len(found) != 1:
            raise BuildError(f"{directory}: expected exactly one {n:04d}-*.patch, found {len(found)}",
                             "point --patches at layers/meta-edge-llm/recipes-ai/litert-lm/files")
        out.append(found[0])
    return out


# -- ELF checks and packing ----------------------------------------------------------------

def elf_machine(path: Path) -> int | None:
    """e_machine of an ELF file, None if it is not ELF (e.g. a Git LFS pointer)."""
    with open(path, "rb") as f:
        head = f.read(20)
    if len(head) < 20 or head[:4] != b"\x7fELF":
        return None
    return int.from_bytes(head[18:20], "little" if head[5] == 1 else "big")


def check_aarch64(path: Path, name: str, env: Mapping[str, str]) -> None:
    """``name`` must be a real aarch64 ELF: not an LFS pointer, readelf says AArch64 (and `file` agrees)."""
    with open(path, "rb") as f:
        head = f.read(len(LFS_POINTER))
    if head == LFS_POINTER:
        raise BuildError(f"{name} is a Git LFS pointer, not the library",
                         "install git-lfs and run `git lfs pull` in the LiteRT-LM checkout (needs GitHub LFS access)")
    machine = elf_machine(path)
    if machine is None:
        raise BuildError(f"{name} ({path}) is not an ELF file", "rebuild; check the bazel output")
    readelf = _tool("readelf", env, "install binutils (readelf checks the built files)")
    r = subprocess.run([readelf, "-h", str(path)], capture_output=True, text=True, env=dict(env),
                       stdin=subprocess.DEVNULL)
    m = re.search(r"Machine:\s*(.+)", r.stdout)
    said = m.group(1).strip() if m else f"readelf failed ({r.returncode})"
    if r.returncode != 0 or "AArch64" not in said or machine != EM_AARCH64:
        raise BuildError(f"{name} is not an aarch64 ELF (readelf: {said})",
                         "build on an aarch64 host; a cross/x86 build cannot run on the board")
    file_cmd = shutil.which("file", path=env.get("PATH"))
    if file_cmd:
        out = subprocess.run([file_cmd, "-b", str(path)], capture_output=True, text=True,
                             stdin=subprocess.DEVNULL).stdout
        if out and "aarch64" not in out and "ELF" in out:
            raise BuildError(f"{name}: `file` says '{out.strip()}'", "build on an aarch64 host")


def write_tarball(files: Mapping[str, Path | bytes], dest: Path) -> str:
    """Deterministic .tar.gz (sorted, mtime 0, uid/gid 0, fixed modes, gzip mtime 0); returns sha256.

    Same inputs -> same bytes, so the sha256 pinned in the recipe only changes when a file does.
    """
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tf:
        dirs = sorted({str(Path(n).parent) for n in files if str(Path(n).parent) != "."})
        for entry in sorted([*(d + "/" for d in dirs), *files]):
            ti = tarfile.TarInfo(entry.rstrip("/"))
            ti.mtime, ti.uid, ti.gid, ti.uname, ti.gname = 0, 0, 0, "", ""
            if entry.endswith("/"):
                ti.type, ti.mode = tarfile.DIRTYPE, 0o755
                tf.addfile(ti)
                continue
            src = files[entry]
            ti.mode = 0o755 if entry.startswith("bin/") else 0o644
            if isinstance(src, bytes):
                ti.size = len(src)
                tf.addfile(ti, io.BytesIO(src))
                continue
            ti.size = src.stat().st_size
            with open(src, "rb") as f:
                tf.addfile(ti, f)
    data = buf.getvalue()
    digest = hashlib.sha256(data).hexdigest()
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, dest)
    sha = dest.with_name(dest.name + ".sha256")
    tmp = sha.with_name(f".{sha.name}.tmp")
    tmp.write_text(f"{digest}  {dest.name}\n", encoding="utf-8")
    os.replace(tmp, sha)
    return digest


def _find_output(bazel_bin: Path, candidates: list[str], name: str) -> Path:
    """The built file: the first candidate path that exists, else the shallowest file named ``name``."""
    for c in candidates:
        p = bazel_bin / c
        if p.is_file():
            return p
    hits = []
    for dirpath, _dirs, filenames in os.walk(bazel_bin, followlinks=False):
        if name in filenames and ".runfiles" not in dirpath:
            hits.append(Path(dirpath) / name)
    if not hits:
        raise BuildError(f"bazel did not produce {name} under {bazel_bin}", "check the bazel build output above")
    return min(hits, key=lambda p: len(p.parts))


# -- the steps -------------------------------------------------------------------------------

class LitertBuild:
    """The steps of one runtime build; ``describe()`` lists them, ``run()`` executes them."""

    def __init__(self, opts: LitertOptions, reporter: Reporter | None = None) -> None:
        self.o = opts
        self.r = reporter or Reporter()
        self.env = dict(opts.env)
        self.sdk = qairt_sdk_value(opts.qairt_sdk or self.env.get("LITERT_QAIRT_SDK"), opts.qairt)
        self.env["LITERT_QAIRT_SDK"] = self.sdk
        self.patches = find_patches(opts.patches)
        self.output_base: Path | None = None
        self.result: LitertResult | None = None

    # argv helpers (the tools are looked up at run time, named plainly in the dry run)
    def _bazel(self) -> str:
        return _tool("bazel", self.env, "install bazelisk (it reads .bazelversion: 7.6.1)", ("bazelisk",))

    @property
    def bazel_flags(self) -> list[str]:
        return ["--repo_env=CC=clang-18", "--repo_env=CXX=clang++-18"]

    @property
    def targets(self) -> list[str]:
        """What is fetched, then built: the runtime, the Qualcomm dispatch library, the C API library."""
        return [TARGET_MAIN, TARGET_DISPATCH, TARGET_CAPI]

    def steps(self, bazel: str = "bazel") -> list[Command]:
        o, src = self.o, self.o.src
        source = o.source or UPSTREAM
        p1, p2, p3 = self.patches
        return [
            Command("source", fn=self._source, what=f"clone {source} into {src} (reuse if present), check out {o.rev}"),
            Command("lfs", fn=self._lfs_pull, what=f"$ git -C {src} lfs pull (a local --source's own LFS files "
                 "are used when its LFS server is unreachable)"),
            Command("lfs-check", fn=lambda: self._check_lfs(), what=f"{LFS_LIB} must be an ELF, not an LFS pointer"),
            Command("patch-1", fn=lambda: apply_patch(p1, src), what=f"apply {p1.name} in {src}"),
            Command("patch-2", fn=lambda: apply_patch(p2, src), what=f"apply {p2.name} in {src}"),
            # every target the build names: --nofetch then finds each package's load()s (e.g.
            # python/litert_lm/BUILD:15-21,221-223 at cbf463d: @org_tensorflow, @rules_python,
            # @bazel_skylib) and each dep (its @nlohmann_json) already fetched
            Command("fetch", argv=[bazel, "fetch", *self.bazel_flags, *self.targets], cwd=src),
            Command("patch-3", fn=self._patch_external,
                 what=f"apply {p3.name} in $(bazel info output_base)/external/litert"),
            Command("build", argv=[bazel, "build", "--nofetch", "-c", "opt", *self.bazel_flags, *self.targets],
                    cwd=src),
            Command("collect", fn=self._collect, what=f"collect the {len(on_board.LITERT_FILES)} files, check aarch64 "
                 "ELF (readelf -h, file), "
                 f"write {o.out / tarball_name(o.rev, o.qairt)} + .sha256"),
        ]

    def describe(self) -> list[str]:
        """The dry run's lines: the QAIRT SDK, then each step as it would run."""
        lines = [f"LITERT_QAIRT_SDK={self.sdk}"]
        lines += [s.describe() for s in self.steps()]
        return lines

    def run(self) -> LitertResult:
        bazel = self._bazel()
        for tool, hint in (("git", "install git"), ("patch", "install patch"), ("clang-18", "install clang-18"),
                           ("clang++-18", "install clang-18 (provides clang++-18)")):
            _tool(tool, self.env, hint)
        lfs = subprocess.run(["git", "lfs", "version"], capture_output=True, env=self.env, stdin=subprocess.DEVNULL)
        if lfs.returncode != 0:
            raise BuildError("git-lfs is not installed", "install git-lfs (libGemmaModelConstraintProvider.so is "
                             "stored in Git LFS)")
        commands = self.steps(bazel)
        numbers = {c.name: i for i, c in enumerate(commands, 1)}

        def on_event(ev: StepEvent) -> None:
            if ev.kind == "start":
                self.r.step(f"[{numbers[ev.step]}/{len(commands)}] {by_name[ev.step].describe()}")
            elif ev.kind == "stop" and ev.detail.get("result"):
                self.r.info(f"    {ev.detail['result']}")

        by_name = {c.name: c for c in commands}
        runner = StepRunner(on_event=on_event)
        runner.run([Step(c.name, self._action(c), what=c.describe()) for c in commands])
        if runner.error is not None:
            raise runner.error
        assert self.result is not None
        return self.result

    def _action(self, command: Command) -> Callable[[], str | None]:
        """What a step runs: the Python action, or the command streamed through the one process runner."""
        if command.fn is not None:
            return command.fn
        argv = command.argv
        assert argv is not None

        def run() -> None:
            self._exec(command.name, argv, command.cwd)
        return run

    def _exec(self, name: str, argv: list[str], cwd: Path | None) -> str:
        from provisioner.process import run_streaming

        log = self.o.work / "litert-build.log"
        res = run_streaming(argv, on_line=lambda ln: self.r.info(f"    {ln}") if name != "info" else None,
                            log_path=log, env=self.env, cwd=cwd)
        if res.returncode != 0:
            last = next((ln for ln in reversed(res.tail) if ln.strip()), "no output")
            raise BuildError(f"step '{name}' failed ({argv[0]} exit {res.returncode}): {last}",
                             f"full output in {log}")
        return "\n".join(res.tail)

    # -- python steps --
    def _git(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=cwd, env=self.env,
                              stdin=subprocess.DEVNULL)

    def _source(self) -> str:
        o, src = self.o, self.o.src
        o.work.mkdir(parents=True, exist_ok=True)
        fresh = False
        if (src / ".git").exists():
            how = f"reusing {src}"
        else:
            source = o.source or UPSTREAM
            if o.source and Path(o.source).expanduser().exists():
                source = str(Path(o.source).expanduser().resolve())
            r = self._git("clone", "--no-checkout", source, str(src))
            if r.returncode != 0:
                raise BuildError(f"git clone {source} failed: {(r.stderr or r.stdout).strip().splitlines()[-1:]}",
                                 "check network access or pass --source with a local clone/mirror")
            how, fresh = f"cloned {source}", True
        if self._git("cat-file", "-e", f"{o.rev}^{{commit}}", cwd=src).returncode != 0:
            self._git("fetch", "origin", o.rev, cwd=src)
            if self._git("cat-file", "-e", f"{o.rev}^{{commit}}", cwd=src).returncode != 0:
                raise BuildError(f"commit {o.rev} is not in {src}", "fetch it, or pass --source with a clone "
                                 "that has it")
        head = self._git("rev-parse", "HEAD", cwd=src).stdout.strip()
        want = self._git("rev-parse", f"{o.rev}^{{commit}}", cwd=src).stdout.strip()
        if head != want or fresh:
            dirty = "" if fresh else self._git("status", "--porcelain", "--untracked-files=no", cwd=src).stdout.strip()
            if dirty:
                raise BuildError(f"{src} has local changes and is not at {o.rev[:12]}",
                                 "commit/discard them or remove the checkout")
            r = self._git("checkout", "-q", "--detach", want, cwd=src)
            if r.returncode != 0:
                raise BuildError(f"git checkout {o.rev} failed: {r.stderr.strip()}", "inspect the checkout")
        return f"{how}; at {want[:12]}"

    def _local_source_lib(self) -> Path | None:
        """The real library in a local ``--source`` working tree (an offline mirror), if it is one."""
        if not self.o.source or not Path(self.o.source).expanduser().is_dir():
            return None
        lib = Path(self.o.source).expanduser() / LFS_LIB
        return lib if lib.is_file() and elf_machine(lib) is not None else None

    def _lfs_pull(self) -> str:
        try:
            self._exec("lfs", ["git", "-C", str(self.o.src), "lfs", "pull"], None)
            return "git lfs pull done"
        except BuildError:
            local = self._local_source_lib()
            if local is None:
                raise
            shutil.copy2(local, self.o.src / LFS_LIB)
            return f"git lfs pull failed; took {LFS_LIB} from the local source {self.o.source}"

    def _check_lfs(self) -> str:
        lib = self.o.src / LFS_LIB
        if not lib.is_file():
            raise BuildError(f"{LFS_LIB} missing from the checkout", f"LiteRT-LM must be at {PINNED_COMMIT[:12]}")
        with open(lib, "rb") as f:
            if f.read(len(LFS_POINTER)) == LFS_POINTER:
                raise BuildError(f"{LFS_LIB} is still a Git LFS pointer after `git lfs pull`",
                                 "check git-lfs access to github.com (the 22 MB library is stored in LFS)")
        return f"{LFS_LIB}: {lib.stat().st_size} bytes"

    def _patch_external(self) -> str:
        out = self._exec("info", [self._bazel(), "info", *self.bazel_flags, "output_base"], self.o.src)
        base = next((ln.strip() for ln in reversed(out.splitlines()) if ln.strip().startswith("/")), "")
        if not base:
            raise BuildError("`bazel info output_base` printed no path", "run it by hand in the checkout")
        self.output_base = Path(base)
        ext = self.output_base / "external" / "litert"
        if not ext.is_dir():
            raise BuildError(f"{ext} not found after `bazel fetch`", "the @litert repository was not fetched")
        return f"{apply_patch(self.patches[2], ext)} in {ext}"

    def _collect(self) -> str:
        src = self.o.src
        bazel_bin = src / "bazel-bin"
        files: dict[str, Path] = {}
        for dest, candidates in OUTPUTS.items():
            files[dest] = _find_output(bazel_bin, candidates, Path(candidates[0]).name)
        files["lib/libGemmaModelConstraintProvider.so"] = src / LFS_LIB
        for dest, path in files.items():
            check_aarch64(path, dest, self.env)
        sums = {k: sha256_file(v) for k, v in sorted(files.items())}
        # provenance inside the tarball (deterministic: no dates or host names)
        info = {"litert_lm": self._git("rev-parse", "HEAD", cwd=src).stdout.strip(), "qairt": self.o.qairt,
                "patches": {p.name: sha256_file(p) for p in self.patches}, "files": sums}
        payload: dict[str, Path | bytes] = dict(files)
        payload["BUILDINFO.json"] = (json.dumps(info, indent=2, sort_keys=True) + "\n").encode()
        tar = self.o.out / tarball_name(self.o.rev, self.o.qairt)
        digest = write_tarball(payload, tar)
        self.result = LitertResult(tar, digest, sums)
        return f"{tar} sha256 {digest}"



def litert_build(opts: LitertOptions, *, dry_run: bool = False, reporter: Reporter | None = None
                 ) -> LitertResult | list[str]:
    """Build the runtime tarball (or, with ``dry_run``, return the steps as lines)."""
    reporter = reporter or Reporter()
    warning = check_host(opts.allow_cross or dry_run)
    if warning:
        reporter.warn(warning)
    job = LitertBuild(opts, reporter)
    if dry_run:
        return job.describe()
    return job.run()
