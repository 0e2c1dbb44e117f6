"""edge-llm-serve against the hostile pass of issue 21: metric bombs, header and reply framing, a missing
token, slow bodies, one greedy client, secrets and control bytes in the log, odd framing, stuck queries."""

from __future__ import annotations

import http.client
import json
import select
import socket
import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families

from .test_openai_api import raw

ROUTES = {"/health", "/livez", "/v1/models", "/metrics", "/v1/chat/completions", "/v1/completions"}


def connect(board, source: str = "127.0.0.1") -> socket.socket:
    return socket.create_connection(("127.0.0.1", board.port), timeout=20, source_address=(source, 0))


def read_all(s: socket.socket) -> bytes:
    out = b""
    while chunk := s.recv(65536):
        out += chunk
    return out


def exchange(board, data: bytes, *, half_close: bool = False) -> bytes:
    """Send ``data`` on a fresh connection (then shut our sending side if asked); the whole reply."""
    with connect(board) as s:
        s.sendall(data)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        return read_all(s)


def auth_line(board) -> bytes:
    return b"Authorization: Bearer " + board.token.encode() + b"\r\n"


def status_of(reply: bytes) -> int:
    assert reply.startswith(b"HTTP/1.1 "), reply[:200]
    return int(reply.split(b" ", 2)[1])


# -- item 5: metric labels, the header limit, whole replies -----------------------------------------


def test_unknown_paths_count_under_one_label_not_their_own(start_board):
    board = start_board()
    for i in range(200):
        assert raw(board, "GET", f"/probe-{i}-" + "p" * 200, headers={"Authorization": ""})[0] == 401
        assert raw(board, "POST", f"/nope-{i}", body=b"{}")[0] == 404
    status, _, body = raw(board, "GET", "/metrics")
    assert status == 200
    fams = {f.name: f for f in text_string_to_metric_families(body.decode())}
    req = {(s.labels["endpoint"], s.labels["status"]): s.value for s in fams["edge_llm_requests"].samples}
    assert {ep for ep, _ in req} <= ROUTES | {"other"}, sorted(req)[:5]
    assert req[("other", "401")] == 200 and req[("other", "404")] == 200
    assert b"probe-" not in body and b"nope-" not in body


def test_the_header_limit_holds_when_the_head_arrives_in_one_read(start_board):
    board = start_board()
    # 30 000 bytes: over the 16 KiB limit, under loopback's 64 KiB segment, so one recv gets the whole head
    head = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 30000 + b"\r\n\r\n"
    reply = exchange(board, head)
    assert status_of(reply) == 431 and b'"error"' in reply


def test_a_reply_larger_than_the_socket_buffers_arrives_whole(start_board):
    with open("/proc/sys/net/ipv4/tcp_wmem") as fh:
        wmem_max = int(fh.read().split()[2])
    size = 2 * wmem_max + (1 << 20)     # more than one send() can queue, whatever the kernel's buffer sizes
    board = start_board(max_body_bytes=size + 4096)
    body = json.dumps({"model": "m" * size, "prompt": "x"}).encode()
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    s.settimeout(30)
    s.connect(("127.0.0.1", board.port))
    with s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + auth_line(board)
                  + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        reply = read_all(s)
    head, _, payload = reply.partition(b"\r\n\r\n")
    length = int(next(ln for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length:")).split(b":")[1])
    assert status_of(reply) == 404
    assert len(payload) == length, f"{len(payload)} of {length} bytes arrived"
    assert json.loads(payload)["error"]["code"] == "model_not_found"


# -- item 6: no token file, no service ---------------------------------------------------------------


@pytest.mark.parametrize("token_file", ["missing", None, ""])
def test_without_a_token_file_the_service_refuses_to_start(start_board, tmp_path, token_file):
    board = start_board(token=False, wait=False, **({} if token_file == "missing" else {"token_file": token_file}))
    try:
        code = board.proc.wait(15)
    except subprocess.TimeoutExpired:
        code = None
    log = board.log.read_text()
    assert code == 2, f"still running without a token: {log}"
    lines = log.strip().splitlines()
    assert len(lines) == 1 and "token" in lines[0] and "Traceback" not in log
    if token_file == "missing":
        assert str(tmp_path / "token0") in lines[0]


# -- item 11: slow bodies -----------------------------------------------------------------------------


def test_slow_bodies_leave_health_a_slot(start_board):
    board = start_board(max_handlers=4)
    slow = []
    try:
        for _ in range(6):     # each holds a handler while its body never arrives
            s = connect(board)
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + auth_line(board)
                      + b"Content-Length: 100\r\n\r\n{")
            slow.append(s)
        status, _, body = raw(board, "GET", "/health")
        assert status == 200 and json.loads(body)["ready"] is True
    finally:
        for s in slow:
            s.close()


def test_a_body_that_trickles_in_gets_408(start_board):
    board = start_board(body_timeout_s=1)
    with connect(board) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + auth_line(board) + b"Content-Length: 60\r\n\r\n")
        for _ in range(60):           # a byte every 0.2 s: each read succeeds, the body never ends in time
            s.sendall(b" ")
            if select.select([s], [], [], 0.2)[0]:
                break
        reply = read_all(s)
    assert status_of(reply) == 408 and b'"error"' in reply


# -- low: per-client cap, the log, framing, stuck generations -------------------------------------------


def test_one_client_cannot_take_every_connection(start_board):
    board = start_board(max_connections=20, max_client_connections=10, idle_timeout_s=30)
    greedy = []
    try:
        for _ in range(20):
            s = connect(board)
            s.sendall(b"GET /health HTTP/1.1\r\n")       # never finishes its head
            greedy.append(s)
        # another client still gets in (answered after every greedy connection was accepted or refused)
        c = http.client.HTTPConnection("127.0.0.1", board.port, timeout=20, source_address=("127.0.0.2", 0))
        c.request("GET", "/health")
        assert c.getresponse().status == 200
        c.close()
        # at most 10 got in (one more may be refused while wait_ready's own connection is being closed)
        refused = select.select(greedy, [], [], 0.5)[0]
        assert len(refused) >= 10 and all(status_of(read_all(s)) == 503 for s in refused)
    finally:
        for s in greedy:
            s.close()


def test_a_token_in_the_query_string_is_not_logged(start_board):
    board = start_board()
    status, _, _ = raw(board, "GET", f"/v1/models?api_key={board.token}", headers={"Authorization": ""})
    assert status == 401
    log = board.log.read_text()
    assert "/v1/models" in log and board.token not in log


def test_control_bytes_from_the_request_line_are_escaped_in_the_log(start_board):
    board = start_board()
    reply = exchange(board, b"GET /a\x1b[2Jb\x07c\x9b HTTP/1.1\r\nHost: x\r\n" + auth_line(board) + b"\r\n")
    assert status_of(reply) == 404
    log = board.log.read_bytes()
    assert b"\x1b" not in log and b"\x07" not in log and "\x9b".encode() not in log
    assert b"/a\\x1b[2Jb\\x07c\\x9b" in log


@pytest.mark.parametrize("length", [b"\xb2", b"1\xb3", b"1_0"])   # Latin-1 '²', '1³': str.isdigit() says yes
def test_a_content_length_that_is_not_ascii_digits_gets_400(start_board, length):
    board = start_board()
    reply = exchange(board, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + auth_line(board)
                     + b"Content-Length: " + length + b"\r\n\r\n{}")
    assert status_of(reply) == 400 and b"Content-Length" in reply


@pytest.mark.parametrize("request_bytes", [b"GET /health HTTP/1.1\r\nHost: x\r\n",                  # in the head
                                           b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n"
                                           b"AUTH\r\n\r\n{\"prompt\""])                                # in the body
def test_a_half_closed_request_gets_400(start_board, request_bytes):
    board = start_board()
    reply = exchange(board, request_bytes.replace(b"AUTH\r\n", auth_line(board)), half_close=True)
    assert status_of(reply) == 400 and b'"error"' in reply


@pytest.mark.parametrize("runtime", ["litert_lm", "genie"])
def test_a_generation_that_never_ends_is_stopped_at_timeout_s(start_board, runtime):
    board = start_board(runtime, timings={"ttft_ms": 600000}, timeout_s=1)   # the first token never comes
    status, _, body = raw(board, "POST", "/v1/completions", json.dumps({"prompt": "x"}).encode(),
                          {"Content-Type": "application/json"})
    err = json.loads(body)["error"]
    assert status == 500 and err["code"] == "runtime_error" and "did not finish within 1 s" in err["message"]
    assert raw(board, "GET", "/health")[0] == 200



def test_the_per_client_cap_counts_an_ipv6_client_by_its_64():
    from provisioner.fleet.shared.onboard import serve
    # one host usually holds a whole /64 (RFC 6177): counting per address would let it open 2^64 "clients"
    assert serve.client_key(("2001:db8:1:2::1", 1, 0, 0)) == serve.client_key(("2001:db8:1:2:ffff::9", 2, 0, 0))
    assert serve.client_key(("2001:db8:1:3::1", 1, 0, 0)) != serve.client_key(("2001:db8:1:2::1", 1, 0, 0))
    assert serve.client_key(("fe80::1%eth0", 1, 0, 2)) == serve.client_key(("fe80::2%eth0", 1, 0, 2))
    assert serve.client_key(("192.0.2.7", 1)) == "192.0.2.7"
