"""`provisioner cache serve`: hash server + read-only HTTP sstate mirror on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from provisioner import context
from provisioner.errors import BuildError
from provisioner.image import cache as C
from provisioner.manifest import load_manifest

HASHSERV = r'''#!/usr/bin/env python3
import json, os, signal, socket, sys
args = sys.argv[1:]
with open(os.environ["STANDIN_RECORD"], "a") as f:
    f.write(json.dumps(args) + "\n")
host, port = args[args.index("--bind") + 1].rsplit(":", 1)
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((host or "0.0.0.0", int(port))); s.listen(5)
print("Listening on", host, port, flush=True)
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
while True:
    c, _ = s.accept(); c.close()
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def hs(tmp_path, monkeypatch):
    bindir = tmp_path / "bitbake" / "bin"
    bindir.mkdir(parents=True)
    exe = bindir / "bitbake-hashserv"
    exe.write_text(HASHSERV)
    exe.chmod(0o755)
    monkeypatch.setenv("STANDIN_RECORD", str(tmp_path / "record.jsonl"))
    sstate = tmp_path / "sstate"
    (sstate / "ab").mkdir(parents=True)
    (sstate / "ab" / "sstate:zlib:x.tar.zst").write_bytes(b"zstd-data")
    return tmp_path, exe, sstate


def test_serves_sstate_read_only_and_runs_hashserv(hs):
    tmp, exe, sstate = hs
    port = free_port()
    svc = C.start_cache(sstate, context.current(),
                        C.CacheOptions(bind="127.0.0.1", http_port=0, hashserv_port=port, advertise="cache.lan",
                                       db=tmp / "state" / "hashserv.db", hashserv_exe=exe, read_only_hashserv=True))
    try:
        base = f"http://127.0.0.1:{svc.http_port}"
        assert urllib.request.urlopen(f"{base}/ab/sstate:zlib:x.tar.zst", timeout=5).read() == b"zstd-data"
        with pytest.raises(urllib.error.HTTPError) as e404:
            urllib.request.urlopen(f"{base}/ab/missing.tar.zst", timeout=5)
        assert e404.value.code == 404
        req = urllib.request.Request(f"{base}/ab/new.tar.zst", data=b"x", method="PUT")
        with pytest.raises(urllib.error.HTTPError) as eput:
            urllib.request.urlopen(req, timeout=5)
        assert eput.value.code == 501 and not (sstate / "ab" / "new.tar.zst").exists()
        assert svc.stats["hits"] == 1 and svc.stats["misses"] == 1
        argv = json.loads((tmp / "record.jsonl").read_text().splitlines()[0])
        assert argv == ["--bind", f"127.0.0.1:{port}", "--database", str(tmp / "state" / "hashserv.db"),
                        "--read-only"]
        # the snippet is a valid manifest build: section another host can use
        snip = yaml.safe_load(svc.snippet())["build"]
        assert snip == {"sstate_mirrors": [f"http://cache.lan:{svc.http_port}/PATH;downloadfilename=PATH"],
                        "hashserve": f"cache.lan:{port}"}
        m = tmp / "m.yaml"
        m.write_text("manifest: 1\nrelease: r1\nboard: iq-8275-evk\nqairt: ['2.44.0.260225']\nmodels:\n"
                     "  - {name: gemma-4-e2b, kind: litertlm, path: x.litertlm, qairt: '2.44.0.260225'}\n"
                     + svc.snippet())
        assert load_manifest(m).build.hashserve == f"cache.lan:{port}"
        proc = svc.hashserv
    finally:
        svc.stop()
    assert proc.poll() is not None                       # hash server stopped with the service


def test_missing_hashserv_and_bad_dirs(hs, tmp_path, monkeypatch):
    tmp, exe, sstate = hs
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    with pytest.raises(BuildError, match="bitbake-hashserv not found"):
        C.find_hashserv(context.current().env)
    assert C.find_hashserv(context.current().env, bitbake_dir=tmp / "bitbake") == exe
    assert C.find_hashserv(context.current().env, work_dir=tmp) == exe   # kas's bitbake checkout in the work folder
    with pytest.raises(BuildError, match="does not exist"):
        C.start_cache(tmp / "nope", context.current(), C.CacheOptions(hashserv_exe=exe))
    # a hash server that dies at start is reported with its last line
    bad = tmp / "bad-hashserv"
    bad.write_text("#!/bin/sh\necho 'sqlite3.OperationalError: unable to open database file'\nexit 1\n")
    bad.chmod(0o755)
    with pytest.raises(BuildError, match="stopped at start: sqlite3.OperationalError"):
        C.start_cache(sstate, context.current(),
                      C.CacheOptions(bind="127.0.0.1", http_port=0, hashserv_port=free_port(), hashserv_exe=bad,
                                     db=tmp / "db" / "h.db"))


def test_cli_serve_prints_snippet_and_stops_on_ctrl_c(hs):
    tmp, exe, sstate = hs
    port, hport = free_port(), free_port()
    env = dict(os.environ, PATH=f"{exe.parent}:{os.environ['PATH']}", HOME=str(tmp / "home"),
               PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    proc = subprocess.Popen([sys.executable, "-m", "provisioner", "cache", "serve", "--dir", str(sstate),
                             "--bind", "127.0.0.1", "--port", str(port), "--hashserv-port", str(hport),
                             "--advertise", "buildhost1", "--json"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        out = ""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not out.rstrip().endswith("}"):
            out += proc.stdout.readline()
        data = json.loads(out)
        assert data["build"]["hashserve"] == f"buildhost1:{hport}"
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/ab/sstate:zlib:x.tar.zst", timeout=5).read()
        assert body == b"zstd-data"
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    assert proc.returncode == 130
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", hport), timeout=1).close()


def _records(tmp: Path) -> list[list[str]]:
    return [json.loads(ln) for ln in (tmp / "record.jsonl").read_text().splitlines()]


def test_default_serves_this_host_only(hs):
    """No --bind: mirror and hash server on loopback; the one hash server is this host's writer."""
    tmp, exe, sstate = hs
    port = free_port()
    with C.start_cache(sstate, context.current(),
                       C.CacheOptions(http_port=0, hashserv_port=port, db=tmp / "h.db", hashserv_exe=exe)) as svc:
        assert svc.http.server_address[0] == "127.0.0.1"
        assert _records(tmp) == [["--bind", f"127.0.0.1:{port}", "--database", str(tmp / "h.db")]]
        assert svc.hashserve == svc.write_hashserve == f"127.0.0.1:{port}"
        assert yaml.safe_load(svc.snippet())["build"]["hashserve"] == f"127.0.0.1:{port}"


def test_lan_bind_serves_hash_equivalence_read_only_and_writes_on_loopback(hs):
    tmp, exe, sstate = hs
    port, wport = free_port(), free_port()
    db = tmp / "h.db"
    with C.start_cache(sstate, context.current(),
                       C.CacheOptions(bind="0.0.0.0", http_port=0, hashserv_port=port, write_port=wport,
                                      advertise="cache.lan", db=db, hashserv_exe=exe)) as svc:
        reader, writer = _records(tmp)
        assert reader == ["--bind", f"0.0.0.0:{port}", "--database", str(db), "--read-only"]
        assert writer == ["--bind", f"127.0.0.1:{wport}", "--database", str(db)]   # same database
        assert svc.hashserve == f"cache.lan:{port}" and svc.write_hashserve == f"127.0.0.1:{wport}"
        assert svc.as_dict()["hashserv_read_only"] is True
        procs = (svc.hashserv, svc.writer)
        assert svc.alive()
    assert all(p.poll() is not None for p in procs)                   # both stopped with the service
    # the write port defaults to the next one; the same port as the LAN server is refused
    with pytest.raises(BuildError, match="uses the LAN hash server's port"):
        C.start_cache(sstate, context.current(),
                      C.CacheOptions(bind="0.0.0.0", http_port=0, hashserv_port=port, write_port=port, db=db,
                                     hashserv_exe=exe))
    with C.start_cache(sstate, context.current(),
                       C.CacheOptions(bind="0.0.0.0", http_port=0, hashserv_port=port, db=db, hashserv_exe=exe,
                                      read_only_hashserv=True)) as svc:
        assert svc.write_hashserve is None and svc.writer is None   # --read-only-hashserv: nobody writes


def test_cli_lan_bind_prints_both_addresses(hs):
    tmp, exe, sstate = hs
    port, hport, wport = free_port(), free_port(), free_port()
    env = dict(os.environ, PATH=f"{exe.parent}:{os.environ['PATH']}", HOME=str(tmp / "home"),
               PYTHONPATH=str(Path(__file__).resolve().parents[2]), COLUMNS="200")
    proc = subprocess.Popen([sys.executable, "-m", "provisioner", "cache", "serve", "--dir", str(sstate),
                             "--bind", "0.0.0.0", "--port", str(port), "--hashserv-port", str(hport),
                             "--write-port", str(wport), "--advertise", "buildhost1"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out = ""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "hashserve: buildhost1" not in out:
            out += proc.stdout.readline()
    finally:
        proc.send_signal(signal.SIGINT)
        out += proc.communicate(timeout=30)[0]
    assert f"hash equivalence for other hosts 0.0.0.0:{hport} (read-only" in out
    assert f"hash equivalence for this host's builds 127.0.0.1:{wport} (read-write, this host only" in out
    assert f"hashserve: buildhost1:{hport}" in out
