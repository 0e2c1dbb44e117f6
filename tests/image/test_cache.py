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
    svc = C.start_cache(sstate, bind="127.0.0.1", http_port=0, hashserv_port=port, advertise="cache.lan",
                        db=tmp / "state" / "hashserv.db", hashserv_exe=exe, read_only_hashserv=True)
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
        C.find_hashserv()
    assert C.find_hashserv(bitbake_dir=tmp / "bitbake") == exe
    assert C.find_hashserv(work_dir=tmp) == exe           # kas's bitbake checkout in the work folder
    with pytest.raises(BuildError, match="does not exist"):
        C.start_cache(tmp / "nope", hashserv_exe=exe)
    # a hash server that dies at start is reported with its last line
    bad = tmp / "bad-hashserv"
    bad.write_text("#!/bin/sh\necho 'sqlite3.OperationalError: unable to open database file'\nexit 1\n")
    bad.chmod(0o755)
    with pytest.raises(BuildError, match="stopped at start: sqlite3.OperationalError"):
        C.start_cache(sstate, bind="127.0.0.1", http_port=0, hashserv_port=free_port(), hashserv_exe=bad,
                      db=tmp / "db" / "h.db")


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
