"""`provisioner fetch` against a local HTTP server with Range support (never the internet)."""

from __future__ import annotations

import base64
import hashlib
import os
import socket
from pathlib import Path

import pytest

from tests.artifacts.rangeserver import RangeServer

SIZE = 3 * 1024 * 1024 + 12345
NAME = "gemma_qualcomm_qcs8275.litertlm"


@pytest.fixture
def origin(tmp_path):
    root = tmp_path / "origin"
    root.mkdir()
    data = os.urandom(SIZE)
    (root / NAME).write_bytes(data)
    with RangeServer(root) as srv:
        srv.data = data
        srv.sha = hashlib.sha256(data).hexdigest()
        yield srv


def manifest(tmp_path: Path, url: str, *, sha: str | None = None, size: int | None = SIZE,
             mirrors: list[str] | None = None) -> Path:
    lines = ["release: r1", "board: iq-8275-evk", "qairt: ['2.44.0.260225']", "models:",
             "  - name: gemma", "    kind: litertlm", f"    url: {url}", "    qairt: '2.44.0.260225'"]
    if sha:
        lines.append(f"    sha256: '{sha}'")
    if size:
        lines.append(f"    size: {size}")
    lines += ["build:", "  dl_dir: downloads"]
    if mirrors:
        lines.append("  mirrors: [" + ", ".join(repr(m) for m in mirrors) + "]")
    p = tmp_path / "release.yaml"
    p.write_text("\n".join(lines) + "\n")
    return p


def test_interrupted_download_resumes_only_the_rest(tmp_path, origin, cli):
    m = manifest(tmp_path, origin.url(NAME), sha=origin.sha)
    dl = tmp_path / "downloads"
    origin.cut_after = 1_500_000
    r = cli("fetch", m, "--models-only")
    assert r.code == 2 and len(r.err_lines) == 1 and "resume" in r.err
    part = dl / (NAME + ".part")
    assert part.exists() and not (dl / NAME).exists()  # nothing half-written under the final name
    have = part.stat().st_size
    assert 0 < have <= 1_500_000

    r = cli("fetch", m, "--models-only", "--json")
    assert r.code == 0
    second = origin.requests[-1]
    assert second["range"] == f"bytes={have}-" and second["status"] == 206
    assert second["sent"] == SIZE - have  # only the rest went over the wire
    assert (dl / NAME).read_bytes() == origin.data and not part.exists()
    assert r.json()["files"][0]["status"] == "resumed"

    # idempotent: complete + right checksum = no request at all
    n = len(origin.requests)
    r = cli("fetch", m, "--models-only", "--json")
    assert r.code == 0 and r.json()["files"][0]["status"] == "skipped" and len(origin.requests) == n


def test_checksum_mismatch_deletes_partial(tmp_path, origin, cli):
    m = manifest(tmp_path, origin.url(NAME), sha="ab" * 32)
    r = cli("fetch", m, "--models-only")
    assert r.code == 2 and len(r.err_lines) == 1
    assert "sha256 mismatch" in r.err and "partial file deleted" in r.err
    assert list((tmp_path / "downloads").iterdir()) == []


def test_wrong_size_is_caught_without_sha(tmp_path, origin, cli):
    m = manifest(tmp_path, origin.url(NAME), size=SIZE + 1)
    r = cli("fetch", m, "--models-only")
    assert r.code == 2 and f"expected {SIZE + 1}" in r.err
    assert list((tmp_path / "downloads").iterdir()) == []


def test_404_one_line(tmp_path, origin, cli):
    r = cli("fetch", manifest(tmp_path, origin.url("missing.litertlm")), "--models-only")
    assert r.code == 2 and len(r.err_lines) == 1 and "404" in r.err and "check the URL" in r.err
    assert not any((tmp_path / "downloads").iterdir())


def test_timeout_one_line(tmp_path, origin, cli):
    origin.delay_s = 1.5
    r = cli("fetch", manifest(tmp_path, origin.url(NAME)), "--models-only", "--timeout", "0.3")
    assert r.code == 2 and len(r.err_lines) == 1 and "timed out" in r.err


def test_connection_refused_one_line(tmp_path, cli):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    r = cli("fetch", manifest(tmp_path, f"http://127.0.0.1:{port}/{NAME}"), "--models-only")
    assert r.code == 2 and len(r.err_lines) == 1 and "connection refused" in r.err


def test_local_mirror_first_then_origin(tmp_path, origin, cli):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / NAME).write_bytes(origin.data)
    m = manifest(tmp_path, origin.url(NAME), sha=origin.sha, mirrors=[mirror.as_uri()])
    r = cli("fetch", m, "--models-only", "--json")
    assert r.code == 0 and r.json()["files"][0]["source"].startswith("file://")
    assert origin.requests == []  # the origin was never asked

    # an empty mirror falls back to the origin
    (tmp_path / "downloads" / NAME).unlink()
    (mirror / NAME).unlink()
    r = cli("fetch", m, "--models-only", "--json")
    assert r.code == 0 and r.json()["files"][0]["source"] == origin.url(NAME)


def test_qairt_zip_from_mirror_and_dl_dir_override(tmp_path, origin, cli):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / NAME).write_bytes(origin.data)
    (mirror / "v2.44.0.260225.zip").write_bytes(b"PK\x05\x06" + b"\0" * 18)
    m = manifest(tmp_path, origin.url(NAME), mirrors=[mirror.as_uri()])
    other = tmp_path / "elsewhere"
    r = cli("fetch", m, "--dl-dir", other, "--json")
    assert r.code == 0
    # the zip's sha256 is recorded beside it for the plan (no LICENSE.pdf in this zip: no md5 file)
    assert sorted(p.name for p in other.iterdir()) == sorted([NAME, "v2.44.0.260225.zip", "v2.44.0.260225.zip.sha256"])
    assert {f["kind"] for f in r.json()["files"]} == {"model", "qairt"}


def test_bearer_token_from_env_never_printed(tmp_path, origin, cli, monkeypatch):
    origin.token = "s3cret-token-value"
    m = manifest(tmp_path, origin.url(NAME), sha=origin.sha)
    r = cli("fetch", m, "--models-only")
    assert r.code == 2 and "401" in r.err and "PROVISIONER_HTTP_TOKEN" in r.err
    monkeypatch.setenv("PROVISIONER_HTTP_TOKEN", origin.token)
    r = cli("fetch", m, "--models-only")
    assert r.code == 0 and origin.requests[-1]["auth"] == f"Bearer {origin.token}"
    assert origin.token not in r.out + r.err


def test_credentials_in_url_are_redacted(tmp_path, origin, cli):
    url = origin.url("missing.bin").replace("http://", "http://user:pw123@")
    r = cli("fetch", manifest(tmp_path, url), "--models-only")
    assert r.code == 2 and "pw123" not in r.err and "404" in r.err


def test_server_without_range_support_restarts_cleanly(tmp_path, origin, cli):
    m = manifest(tmp_path, origin.url(NAME), sha=origin.sha)
    origin.cut_after = 1_000_000
    assert cli("fetch", m, "--models-only").code == 2
    origin.ranges = False
    r = cli("fetch", m, "--models-only", "--json")
    assert r.code == 0 and origin.requests[-1]["status"] == 200
    assert (tmp_path / "downloads" / NAME).read_bytes() == origin.data  # no stale prefix kept


def test_complete_part_file_is_verified_and_finished(tmp_path, origin, cli):
    m = manifest(tmp_path, origin.url(NAME), sha=origin.sha)
    dl = tmp_path / "downloads"
    dl.mkdir()
    (dl / (NAME + ".part")).write_bytes(origin.data)  # interrupted just before the rename
    r = cli("fetch", m, "--models-only", "--json")
    assert r.code == 0 and origin.requests[-1]["status"] == 416
    assert (dl / NAME).read_bytes() == origin.data and not (dl / (NAME + ".part")).exists()


def test_hint_reads_the_http_status_not_digits_in_the_port():
    from provisioner.artifacts.fetch import _hint

    assert "check the URL" in _hint(["http://127.0.0.1:36401/m.litertlm: HTTP 404 Not Found"])
    assert "credentials" in _hint(["http://127.0.0.1:8404/m.litertlm: HTTP 401 Unauthorized"])


@pytest.fixture
def mirror_server(tmp_path):
    """A second server (another port, plain http) that stands in for a ``build.mirrors`` entry."""
    root = tmp_path / "mirror-root"
    root.mkdir()
    with RangeServer(root) as srv:
        yield srv


def test_token_goes_to_its_origin_never_to_a_plain_http_mirror(tmp_path, origin, mirror_server, cli, monkeypatch):
    monkeypatch.setenv("PROVISIONER_HTTP_TOKEN", "s3cret-token-value")
    origin.token = "s3cret-token-value"
    m = manifest(tmp_path, origin.url(NAME), sha=origin.sha, mirrors=[mirror_server.url("").rstrip("/")])
    r = cli("fetch", m, "--models-only", "--json")
    assert r.code == 0 and r.json()["files"][0]["source"] == origin.url(NAME)
    assert [q["status"] for q in mirror_server.requests] == [404]  # asked first, without credentials
    assert mirror_server.requests[0]["auth"] is None
    assert origin.requests[-1]["auth"] == "Bearer s3cret-token-value"
    assert "s3cret" not in r.out + r.err


def test_mirror_that_holds_the_file_gets_no_token(tmp_path, origin, mirror_server, cli, monkeypatch):
    monkeypatch.setenv("PROVISIONER_HTTP_TOKEN", "s3cret-token-value")
    (mirror_server.root / NAME).write_bytes(origin.data)
    m = manifest(tmp_path, origin.url(NAME), sha=origin.sha, mirrors=[mirror_server.url("").rstrip("/")])
    r = cli("fetch", m, "--models-only", "--json")
    assert r.code == 0 and r.json()["files"][0]["source"].startswith(mirror_server.url(""))
    assert [q["auth"] for q in mirror_server.requests] == [None] and origin.requests == []


def test_netrc_login_is_not_sent_to_a_plain_http_mirror(tmp_path, origin, mirror_server, cli, monkeypatch):
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login ops password pw-from-netrc\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    m = manifest(tmp_path, origin.url(NAME), sha=origin.sha, mirrors=[mirror_server.url("").rstrip("/")])
    r = cli("fetch", m, "--models-only")
    assert r.code == 0
    assert mirror_server.requests[0]["auth"] is None
    assert origin.requests[-1]["auth"] == "Basic " + base64.b64encode(b"ops:pw-from-netrc").decode()
    assert "pw-from-netrc" not in r.out + r.err


def test_credentials_follow_the_origin_rule():
    from provisioner.artifacts.fetch import _Credentials

    class Req:
        def __init__(self, url: str) -> None:
            self.url, self.headers = url, {}

    auth = _Credentials("https://models.example:443/g.litertlm", "t0k", trust_env=False)
    sent = {u: auth(Req(u)).headers.get("Authorization") for u in (
        "https://models.example/g.litertlm",        # the origin itself (default port)
        "https://models.example:8443/g.litertlm",   # another port: another origin
        "http://models.example/g.litertlm",         # plain http: another origin
        "https://mirror.lan/g.litertlm",            # another host
    )}
    assert sent == {"https://models.example/g.litertlm": "Bearer t0k", "https://models.example:8443/g.litertlm": None,
                    "http://models.example/g.litertlm": None, "https://mirror.lan/g.litertlm": None}
