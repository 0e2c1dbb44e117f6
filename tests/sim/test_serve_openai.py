"""The official openai client against edge-llm-serve on virtual boards of both types.

The service runs as the fleet installs it (fleet.launch.units: unit, config, drop-in) on the
board's stand-in runtime library, so chat, completions, streaming, the model list and errors are
checked through the same path a user's client takes on a real board.
"""

from __future__ import annotations

import openai
import pytest

from tests.sim.servehelp import start_service
from tests.sim.test_host_support import needs_root

pytestmark = [needs_root, pytest.mark.root]


@pytest.mark.parametrize("board_id", ["iq-8275-evk", "iq-9075-evk"])
def test_openai_client_on_a_virtual_board(module_boards, board_id):
    vb = module_boards.start(board_id)
    url, model, token = start_service(vb, module_boards.root)
    c = openai.OpenAI(base_url=url + "/v1", api_key=token, max_retries=0, timeout=60)
    assert [m.id for m in c.models.list().data] == [model]
    chat = c.chat.completions.create(model=model, max_tokens=8,
                                     messages=[{"role": "user", "content": "Explain what Qualcomm is."}])
    assert chat.choices[0].message.content.strip() and chat.usage.completion_tokens >= 1
    pieces = [ch.choices[0].delta.content for ch in c.chat.completions.create(
        model=model, max_tokens=8, stream=True, messages=[{"role": "user", "content": "Explain gravity."}])
        if ch.choices and ch.choices[0].delta.content]
    assert len(pieces) >= 2 and "".join(pieces).strip()
    comp = c.completions.create(model=model, prompt="Explain gravity.", max_tokens=4)
    assert comp.choices[0].text.strip() and comp.usage.completion_tokens <= 4
    with pytest.raises(openai.NotFoundError) as exc:
        c.completions.create(model="gpt-4", prompt="x")
    assert exc.value.body["code"] == "model_not_found"


def test_a_service_without_its_token_stops_and_is_not_restarted(module_boards):
    """edge-llm-serve exits 2 without its token file, and RestartPreventExitStatus=2 keeps systemd from
    restarting it every RestartSec: the unit stays failed with one clear line in its journal."""
    import subprocess
    import time

    from provisioner.contracts.board import TOKEN_FILE
    from provisioner.sim import host

    vb = module_boards.start("iq-8275-evk")
    _url, model, _token = start_service(vb, module_boards.root)
    unit = f"edge-llm-serve@{model}.service"

    def on_board(*cmd: str) -> str:
        return subprocess.run(host.ssh_argv(vb, *cmd), capture_output=True, text=True, timeout=60).stdout.strip()

    on_board("rm", "-f", TOKEN_FILE)
    on_board("systemctl", "restart", unit)
    for _ in range(50):
        if on_board("systemctl", "show", "-p", "ActiveState", "--value", unit) == "failed":
            break
        time.sleep(0.2)
    time.sleep(3)                                           # longer than RestartSec=2: no restart came
    assert on_board("systemctl", "show", "-p", "ActiveState", "--value", unit) == "failed"
    assert on_board("systemctl", "show", "-p", "NRestarts", "--value", unit) == "0"
