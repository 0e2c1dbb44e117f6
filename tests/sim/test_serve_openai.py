"""The official openai client against edge-llm-serve on virtual boards of both types.

The service runs as the fleet installs it (fleet.service.units: unit, config, drop-in) on the
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
