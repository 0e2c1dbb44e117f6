"""Start edge-llm-serve as the board runs it (its own process) on the simulator's stand-in C-API libraries.

The libraries are provisioner/sim's (cstandins builds them from sim/clib, as for virtual boards),
in their board-less mode: EDGE_LLM_SIM_BOARDLESS gives the timings, the answer is the fixed words
"alpha beta gamma ...", a prompt with CRASH aborts the process and one with FAIL fails the query.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from provisioner.contracts import board as on_board
from provisioner.fleet.shared.onboard import SERVE_SCRIPT
from provisioner.sim import cstandins

TOKEN = "t0k3n-for-tests-0123456789abcdef"
BOARDLESS = "EDGE_LLM_SIM_BOARDLESS"


@pytest.fixture(scope="session")
def standin_libs() -> dict[str, Path]:
    """runtime -> the simulator's stand-in library for it (compiled once, cached by source hash)."""
    return {"litert_lm": cstandins.build(cstandins.LITERT_LM, on_board.LITERT_QAIRT),
            "genie": cstandins.build("libGenie.so", on_board.LITERT_QAIRT)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Board:
    """One running service: its URL, token, process and stderr."""

    def __init__(self, proc: subprocess.Popen, port: int, token: str | None, log: Path, cfg_path: Path) -> None:
        self.proc, self.port, self.token, self.log, self.cfg_path = proc, port, token, log, cfg_path
        self.url = f"http://127.0.0.1:{port}"

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def wait_ready(self, timeout: float = 20) -> None:
        import http.client
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"service exited {self.proc.returncode}: {self.log.read_text()}")
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError("service never became ready: " + self.log.read_text())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def start_board(tmp_path, standin_libs):
    """start_board(runtime="litert_lm", token=True, timings={"ttft_ms": 50, ...}, **cfg) -> a ready Board."""
    boards: list[Board] = []

    def start(runtime: str = "litert_lm", token: bool = True, timings: dict[str, int] | None = None,
              wait: bool = True, listen: socket.socket | None = None, **extra) -> Board:
        """``listen``: a listening socket handed over as systemd's socket activation does (sd_listen_fds(3):
        fd 3, LISTEN_FDS=1, LISTEN_PID the service's own pid: a small exec wrapper knows it, exec keeps it)."""
        n = len(boards)
        mdir = tmp_path / f"model{n}"
        mdir.mkdir()
        cfg = {"model": "gemma-4-e2b" if runtime == "litert_lm" else "nemotron-nano-4b", "runtime": runtime,
               "model_dir": str(mdir), "executable": str(tmp_path / "bin" / "runtime"),
               "library": str(standin_libs[runtime]),
               "port": free_port(), "bind": "127.0.0.1", "token_file": str(tmp_path / f"token{n}")}
        if runtime == "litert_lm":
            (mdir / "m.litertlm").write_bytes(b"LITERTLM")
            cfg |= {"model_file": "m.litertlm", "chat_template": "gemma"}
        else:
            (mdir / "genie_config.json").write_text(json.dumps({"dialog": {"type": "basic"}}))
            cfg |= {"chat_template": "llama3", "system_prompt": "detailed thinking off"}
        cfg |= extra
        if token:
            tf = Path(cfg["token_file"])
            tf.write_text(TOKEN + "\n")
            tf.chmod(0o600)
        cfg_path = tmp_path / f"serve{n}.json"
        cfg_path.write_text(json.dumps(cfg))
        log = tmp_path / f"serve{n}.log"
        spec = ",".join(f"{k}={v}" for k, v in (timings or {}).items())
        # answers=1 in timings: the modelled model answers (clib/oracle.h), run by this python
        child_env = {k: v for k, v in os.environ.items() if k != BOARDLESS} | {BOARDLESS: spec,
                                                                               "EDGE_LLM_SIM_PYTHON": sys.executable}
        argv = [sys.executable, str(SERVE_SCRIPT), "serve", "--config", str(cfg_path)]
        keep: tuple[int, ...] = ()
        if listen is not None:
            fd = listen.fileno()
            handover = (f"import os, sys; os.dup2({fd}, 3); os.close({fd}); "
                        "os.environ['LISTEN_PID'] = str(os.getpid()); os.execv(sys.argv[1], sys.argv[1:])")
            argv = [sys.executable, "-c", handover, *argv]
            child_env |= {"LISTEN_FDS": "1", "LISTEN_FDNAMES": "edge-llm-serve@test.socket"}
            keep = (fd,)
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log.open("w"), env=child_env, pass_fds=keep)
        board = Board(proc, listen.getsockname()[1] if listen is not None else cfg["port"], TOKEN if token else None,
                      log, cfg_path)
        boards.append(board)
        if wait:
            board.wait_ready()
        return board

    yield start
    for b in boards:
        b.stop()
