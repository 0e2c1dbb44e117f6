"""Fault matrix, build-input rows: the build inputs and caches under hostile input.

Each row drives what a user runs (the ``provisioner`` CLI, the layer's login check, bitbake's own hash
equivalence client) and returns (what was lost, what the tool said, what the next run did).
bench/fleet_faults.py runs these rows before its board rows; bench/faults.py prints both tables.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout's provisioner and tests/ before an installed copy

import json  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from functools import partial  # noqa: E402
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer  # noqa: E402

from provisioner.hashing import sha256_file  # noqa: E402
from provisioner.sim import synthetic_models as sm  # noqa: E402

EXAMPLE = ROOT / "examples" / "gemma4-e2b-iq8275.yaml"
GEMMA = "gemma-4-e2b"
Row = tuple[str, str, str]     # what was lost, verdict reported, recovery on rerun


def cli(*args: str, env: dict[str, str] | None = None, trace: Path | None = None,
        timeout: float = 300) -> tuple[int, str, str, float]:
    """``provisioner ARGS`` as a user runs it; with ``trace``, under strace (every file syscall logged)."""
    argv = [sys.executable, "-m", "provisioner", *args]
    if trace:
        argv = ["strace", "-f", "-qq", "-e", "trace=%file", "-o", str(trace), *argv]
    t0 = time.monotonic()
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200", **(env or {})})
    return p.returncode, p.stdout, p.stderr, time.monotonic() - t0


def first(err: str) -> str:
    return next((ln.strip() for ln in err.splitlines() if ln.strip()), "")[:150]


class Server:
    """A plain-http file server on 127.0.0.1 that records path, status and Authorization of each request."""

    def __init__(self, root: Path) -> None:
        self.root, self.hits, self.sub = root, [], ""
        hits = self.hits

        class Handler(SimpleHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def send_response(self, code: int, message: str | None = None) -> None:
                hits.append({"path": self.path, "status": code, "auth": self.headers.get("Authorization")})
                super().send_response(code, message)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(root)))
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()



# -- the rows ------------------------------------------------------------------------------------------------

def token_to_mirror(work: Path) -> Row:
    (work / "origin").mkdir()
    (work / "mirror").mkdir()
    data = os.urandom(1 << 20)
    (work / "origin" / "g.litertlm").write_bytes(data)
    origin, mirror = Server(work / "origin"), Server(work / "mirror")
    m = work / "fetch.yaml"
    m.write_text(f"release: r1\nboard: iq-8275-evk\nqairt: ['2.44.0.260225']\nmodels:\n  - name: gemma\n"
                 f"    kind: litertlm\n    url: {origin.url}/g.litertlm\n    qairt: '2.44.0.260225'\n"
                 f"    sha256: '{sha256_file(work / 'origin' / 'g.litertlm')}'\n    size: {len(data)}\n"
                 f"build:\n  dl_dir: dl\n  mirrors: ['{mirror.url}']\n")
    env = {"PROVISIONER_HTTP_TOKEN": "bench-s3cret-token"}
    code, out, err, _ = cli("fetch", str(m), "--models-only", "--json", env=env)
    got = [(int(h["status"]), h["auth"]) for h in mirror.hits]
    leaked = [h for h in mirror.hits if h["auth"]] + ([1] if "bench-s3cret" in out + err else [])
    (work / "mirror" / "g.litertlm").write_bytes(data)       # the mirror has it now; fetch afresh
    shutil.rmtree(m.parent / "dl")
    code2, *_ = cli("fetch", str(m), "--models-only", "--json", env=env)
    leaked += [h for h in mirror.hits if h["auth"]]
    origin.close()
    mirror.close()
    return ("nothing" if not leaked else "token sent to the mirror",
            f"exit {code}; mirror saw {got}; origin saw auth {origin.hits[-1]['auth'][:6]}...",
            f"mirror holds it: exit {code2}, mirror auth {[h['auth'] for h in mirror.hits[len(got):]]}")


def login_policy(work: Path) -> Row:
    sys.path.insert(0, str(ROOT / "layers" / "meta-edge-llm" / "lib"))
    from edgellm import loginpolicy
    rootfs = work / "rootfs-login"
    (rootfs / "etc" / "ssh").mkdir(parents=True)
    # meta-qcom-distro 775dc8c7 recipes-products/images/qcom-minimal-image.bb: EXTRA_USERS_PARAMS sets this hash
    qli = "$6$UDMimfYF$akpHo9mLD4z0vQyKzYxYbsdYxnpUD7B7rHskq1E3zXK8ygxzq719wMxI78i0TIIE0NB1jUToeeFzWXVpBBjR8."
    (rootfs / "etc" / "shadow").write_text(f"root:{qli}:19000:0:99999:7:::\n")
    (rootfs / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (rootfs / "etc" / "ssh" / "sshd_config").write_text("PermitRootLogin yes\n")   # oe-core ssh_allow_root_login
    found = loginpolicy.problems(str(rootfs), "keys-only")
    (rootfs / "etc" / "shadow").write_text("root:*:19000:0:99999:7:::\n")
    (rootfs / "etc" / "ssh" / "sshd_config").write_text("PermitRootLogin prohibit-password\n")
    after = loginpolicy.problems(str(rootfs), "keys-only")
    return ("nothing" if len(found) >= 2 else "unlocked root accepted", f"refused: {'; '.join(found)}"[:150],
            f"locked root, prohibit-password: {after or 'accepted'}")


def manifest_values(work: Path) -> Row:
    text = EXAMPLE.read_text()
    bad = work / "bad-values.yaml"
    bad.write_text(text.replace("inference_user: llm", "inference_user: root")
                   .replace("    - ssh-ed25519", '    - "ssh-ed25519 AAAA\\nEXTRA_IMAGE_FEATURES += debug-tweaks"\n'
                            "    - ssh-ed25519", 1))
    code, out, err, _ = cli("check", str(bad))
    lines = [ln.strip() for ln in (out + err).splitlines() if "inference_user" in ln or "ssh_authorized_keys" in ln]
    r_code, _, r_out, _ = cli("render", str(bad), "--out", str(work / "kas-bad"))
    lost = "nothing" if code != 0 and r_code != 0 and len(lines) >= 2 else f"accepted ({lines})"
    return lost, f"check exit {code}: " + " | ".join(lines)[:170], f"render exit {r_code}: {first(r_out)[:80]}"


BOMB = ('a: &a ["x","x","x","x","x","x","x","x","x","x"]\n'
        + "".join(f"{c}: &{c} [*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p}]\n"
                  for p, c in zip("abcdefgh", "bcdefghi", strict=True)))


def alias_bombs(work: Path) -> Row:
    m = work / "bomb.yaml"
    m.write_text(BOMB + "manifest: 1\nrelease: *i\n")
    code, _, err, secs = cli("check", str(m))
    d = sm.make_genie_bundle(work / "bomb-bundle", parts=2)
    (d / "tool-versions.yaml").write_text(BOMB + "qairt: *i\n")
    code2, _, err2, secs2 = cli("inspect", str(d))
    ok = code == 2 and code2 == 2 and len(err.strip().splitlines()) == 1 and len(err2.strip().splitlines()) == 1
    return ("nothing" if ok else "not refused in one line",
            f"manifest: exit {code} in {secs:.1f} s: {first(err)[:70]} | tool-versions.yaml: exit {code2} in "
            f"{secs2:.1f} s: {first(err2)[:70]}", "")


def ctx_bin_escape(work: Path) -> Row:
    d = sm.make_genie_bundle(work / "esc" / "models" / "b", parts=2)
    secret = work / "esc" / "etc" / "shadow"                     # what '../../etc/shadow' names from the bundle
    secret.parent.mkdir(parents=True)
    secret.write_text("root:v2.44.0.260225999999:secret\n")
    cfg = json.loads((d / "genie_config.json").read_text())
    bins = cfg["dialog"]["engine"]["model"]["binary"]["ctx-bins"]
    bins[1] = "../../etc/shadow"
    (d / "genie_config.json").write_text(json.dumps(cfg))
    trace = work / "inspect.strace"
    code, _, err, _ = cli("inspect", str(d), "--hash", trace=trace)
    touched = [ln for ln in trace.read_text().splitlines() if "etc/shadow" in ln]
    return ("nothing" if not touched and code == 1 else f"{len(touched)} syscalls on etc/shadow"),\
        f"exit {code}: {first(err)}", f"strace: {len(touched)} file syscalls name etc/shadow"


def cache_lan(work: Path, bitbake: Path | None) -> Row:
    hs = bitbake / "bin" / "bitbake-hashserv" if bitbake else shutil.which("bitbake-hashserv")
    if not hs or not Path(hs).is_file():
        return "?", "not run: no bitbake-hashserv (pass --bitbake DIR, a bitbake checkout)", ""
    sys.path.insert(0, str(Path(hs).resolve().parents[1] / "lib"))
    import hashserv  # bitbake's own client, lib/hashserv
    logging.getLogger("hashserv").setLevel(logging.CRITICAL)     # its retries on the refused writer
    logging.getLogger("bb").setLevel(logging.CRITICAL)
    (work / "sstate").mkdir()
    lan = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()[0]
    hport = 20000 + os.getpid() % 20000
    p = subprocess.Popen([sys.executable, "-m", "provisioner", "cache", "serve", "--dir", str(work / "sstate"),
                          "--bind", "0.0.0.0", "--port", "0", "--hashserv-port", str(hport), "--db",
                          str(work / "hs.db"), "--bitbake", str(Path(hs).resolve().parents[1])],
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:        # both hash servers listen once the writer does
            try:
                socket.create_connection(("127.0.0.1", hport + 1), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        th, oh, uh = "1" * 64, "2" * 64, "3" * 64
        with hashserv.create_client(f"{lan}:{hport}") as c:        # a LAN host reports a hash ...
            c.report_unihash(th, "bench.method", oh, uh)
            stored = c.get_unihash("bench.method", th)
        try:
            with hashserv.create_client(f"{lan}:{hport + 1}") as c:   # ... or tries the writer from the LAN
                c.get_unihash("bench.method", th)
            writer_from_lan = "reachable"
        except (OSError, ConnectionError):
            writer_from_lan = "connection refused"
        with hashserv.create_client(f"127.0.0.1:{hport + 1}") as c:   # this host's builds report here
            c.report_unihash(th, "bench.method", oh, uh)
        with hashserv.create_client(f"{lan}:{hport}") as c:
            seen = c.get_unihash("bench.method", th)
    finally:
        p.send_signal(signal.SIGINT)
        out, _ = p.communicate(timeout=60)
    said = next((ln.strip() for ln in out.splitlines() if "hash equivalence for other hosts" in ln), first(out))
    lost = "nothing" if stored is None and writer_from_lan != "reachable" and seen == uh else "LAN could write"
    return (lost, f"{said[:80]}; LAN report to {lan}:{hport} stored: {stored is not None}; writer :{hport + 1} "
            f"from LAN: {writer_from_lan}", f"loopback writer's report seen on the LAN server: {seen == uh}; "
            f"Ctrl-C: exit {p.returncode}")


def _row(name: str, fn: Callable[[], Row], work: Path) -> tuple[str, str, str, str]:
    try:
        lost, said, again = fn()
    except Exception as exc:  # noqa: BLE001
        lost, said, again = "?", f"bench error: {type(exc).__name__}: {exc}", ""
    clean = [s.replace(str(work), "$W").replace("|", "\\|") for s in (said, again)]
    return name, lost, clean[0], clean[1]



def rows(work: Path, bitbake: Path | None) -> list[tuple[str, str, str, str]]:
    """Every row of this file, each in its own folder under ``work``."""
    plain: list[tuple[str, Callable[[Path], Row]]] = [
        ("5 fetch token with a plain-http mirror", token_to_mirror),
        ("6 production rootfs: QLI root hash + PermitRootLogin yes", login_policy),
        ("7 inference_user root + ssh key with a newline", manifest_values),
        ("8 YAML alias bomb (manifest, tool-versions.yaml)", alias_bombs),
        ("9 Genie ctx-bin '../../etc/shadow' (inspect --hash)", ctx_bin_escape),
        ("11 cache serve --bind 0.0.0.0: LAN write", lambda w: cache_lan(w, bitbake))]
    out = []
    for i, (name, fn) in enumerate(plain):
        (work / f"in{i}").mkdir(parents=True)
        out.append(_row(name, lambda fn=fn, d=work / f"in{i}": fn(d), work))
    return out
