"""Build the stand-in NPU shared libraries a virtual board's image carries (gcc, cached by source hash).

The on-board service binds the runtimes' C APIs with ctypes; a virtual board must offer the same
interface, so the image carries real ELF shared libraries compiled here from ``clib/*.c``:

* ``liblitert-lm.so`` at ``<litert dir>/lib`` (where the litert-lm-runtime recipe installs the
  library that ``provisioner litert build`` builds from LiteRT-LM's ``//python/litert_lm:litert-lm``,
  under the name Google's Python package loads it by: python/litert_lm/_ffi.py:104 at cbf463d);
* ``libGenie.so`` in each QAIRT host lib dir (where qairt-runtime installs the SDK's).

It also builds the one program a virtual board runs instead of an idle sshd: ``sshd-socket``
(``clib/sshd_socket.c``, see :func:`program`), the board's socket-activation listener.

Each carries the QAIRT build id as text (like the stub files and the real libraries), so the
QAIRT checks that read a library's build keep working. Builds are cached under
``$PROVISIONER_SIM_CACHE`` (default ``~/.cache/edge-llm-sim``) by the hash of the sources and
the compile command, so starting many boards compiles each variant once.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from provisioner.contracts import board as on_board
from provisioner.errors import SimError
from provisioner.sim import runtime
from provisioner.sim.filelock import locked

SRC_DIR = Path(__file__).with_name("clib")
LITERT_LM = Path(on_board.LITERT_CAPI_LIB).name     # liblitert-lm.so
LIBRARIES = {LITERT_LM: "litert_lm.c", "libGenie.so": "genie.c"}
PROGRAMS = {"sshd-socket": "sshd_socket.c"}
COMMON = ("oracle.c", "oracle.h")


def cache_dir() -> Path:
    base = os.environ.get("PROVISIONER_SIM_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "edge-llm-sim")
    return Path(base) / "clib"


def _stub_id(name: str, qairt: str) -> str:
    # the same text runtime.stub_library puts into the stub files: the build id the checks read
    text = runtime.stub_library(name, qairt).decode()
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _argv(name: str, qairt: str, out: Path) -> list[str]:
    cc = os.environ.get("CC") or "gcc"
    return [cc, "-shared", "-fPIC", "-O2", "-pthread", "-Wall", f"-DSTANDIN_ID={_stub_id(name, qairt)}",
            f"-I{SRC_DIR}", "-o", str(out), str(SRC_DIR / LIBRARIES[name]), str(SRC_DIR / "oracle.c")]


def build(name: str, qairt: str) -> Path:
    """Path of the compiled stand-in ``name`` for QAIRT build ``qairt`` (compiled on first use)."""
    if name not in LIBRARIES:
        raise ValueError(f"no stand-in library '{name}' (known: {', '.join(LIBRARIES)})")
    h = hashlib.sha256()
    for f in (LIBRARIES[name], *COMMON):
        h.update(f.encode() + b"\0" + (SRC_DIR / f).read_bytes())
    h.update("\0".join(_argv(name, qairt, Path("out"))).encode())
    dest = cache_dir() / h.hexdigest()[:20] / name
    if dest.is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    if shutil.which(os.environ.get("CC") or "gcc") is None:
        raise SimError(f"cannot build the virtual boards' {name}: no C compiler (gcc) on PATH",
                       "install gcc (apt-get install gcc) or set CC")
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        out = Path(tmp) / name
        proc = subprocess.run(_argv(name, qairt, out), capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise SimError(f"compiling the virtual boards' {name} failed: {tail}", "see gcc's output above")
        os.replace(out, dest)
    return dest


def program(name: str) -> Path:
    """Path of the compiled host program ``name`` (:data:`PROGRAMS`), built once per source hash.

    Hundreds of boards start at once from worker threads and processes: one compiles under a
    lock, the others wait for it and reuse the result.
    """
    if name not in PROGRAMS:
        raise ValueError(f"no stand-in program '{name}' (known: {', '.join(PROGRAMS)})")
    cc = os.environ.get("CC") or "gcc"
    src = SRC_DIR / PROGRAMS[name]
    argv = [cc, "-O2", "-Wall", "-o"]
    h = hashlib.sha256(src.read_bytes() + b"\0" + "\0".join(argv).encode())
    dest = cache_dir() / h.hexdigest()[:20] / name
    if dest.is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with locked(dest.parent / ".lock"):
        if dest.is_file():
            return dest
        if shutil.which(cc) is None:
            raise SimError(f"cannot build the virtual boards' {name}: no C compiler ({cc}) on PATH",
                           "install gcc (apt-get install gcc) or set CC")
        with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
            out = Path(tmp) / name
            proc = subprocess.run([*argv, str(out), str(src)], capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
                raise SimError(f"compiling the virtual boards' {name} failed: {tail}", "see gcc's output above")
            os.chmod(out, 0o755)
            os.replace(out, dest)
    return dest


def library_bytes(name: str, qairt: str) -> bytes:
    """Content of stand-in ``name`` for QAIRT ``qairt`` (what the bundle writes into the rootfs)."""
    return build(name, qairt).read_bytes()
