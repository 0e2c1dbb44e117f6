"""edge-llm-serve under systemd socket activation (edge-llm-serve@<model>.socket, sd_listen_fds(3)).

The service manager holds the port; the service serves on the socket it is handed and never binds one
itself, so the port is never free for another local user while the service restarts.
"""

from __future__ import annotations

import http.client
import socket

from tests.serve.conftest import TOKEN


def listening() -> socket.socket:
    sock = socket.create_server(("127.0.0.1", 0))
    sock.set_inheritable(True)
    return sock


def get(port: int, path: str, token: str | None = None) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        return conn.getresponse().status
    finally:
        conn.close()


def test_the_service_serves_on_the_socket_systemd_hands_it(start_board):
    sock = listening()
    port = sock.getsockname()[1]
    # the config names the same port: had the service tried to bind it itself, it would have failed (in use)
    board = start_board(listen=sock, port=port)
    sock.close()                                   # only the service holds it now, as systemd's copy would
    assert get(port, "/health") == 200
    assert get(port, "/v1/models") == 401 and get(port, "/v1/models", TOKEN) == 200
    assert "on 127.0.0.1:" in board.log.read_text()


def test_a_socket_on_another_port_than_the_config_is_refused(start_board, tmp_path):
    sock = listening()
    board = start_board(listen=sock, wait=False)   # the config's port is another free port
    assert board.proc.wait(30) == 2
    assert "the socket unit listens on port" in board.log.read_text()
    sock.close()
