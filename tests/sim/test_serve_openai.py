"""The official openai client against edge-llm-serve on virtual boards of both types.

The service runs as the fleet installs it (fleet.service.units: unit, config, drop-in) on the
board's stand-in runtime library, so chat, completions, streaming, the model list and errors are
checked through the same path a user's client takes on a real board.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from pathlib import Path

import openai
import pytest
import requests

from provisioner import catalog
from provisioner.contracts.inventory import HostVars, ModelVars
from provisioner.fleet import service
from provisioner.manifest import load_manifest
from provisioner.sim import control, host, ports
from tests.sim.test_host_support import needs_root

pytestmark = [needs_root, pytest.mark.root]


def _serve(vb, root: Path) -> tuple[str, str]:
    """Install and start the board's first model's service; returns (base url, model)."""
    m = load_manifest(control.builtin_manifest(root, vb.board_id)).models[0]
    mv = ModelVars(name=m.name, kind=m.kind, runtime=m.runtime, qairt=catalog.normalize_qairt(m.qairt),
                   chat_template=m.chat_template or "plain", file=Path(m.path).name if m.kind == "litertlm" else None)
    plan = service.units(HostVars(board=catalog.board(vb.board_id), models=(mv,)), port_base=ports.serve_port_base(vb))
    inst = plan["instances"][0]
    files = {plan["unit_path"]: plan["unit_text"], inst["config_path"]: json.dumps(inst["config"]) + "\n",
             inst["dropin_path"]: inst["dropin"]}
    script = "; ".join(f"mkdir -p {shlex.quote(str(Path(p).parent))} && printf %s {shlex.quote(t)} > {p}"
                       for p, t in files.items())
    script += f"; systemctl daemon-reload && systemctl start {inst['unit']} </dev/null >/dev/null 2>&1"
    subprocess.run(host.ssh_argv(vb, script), check=True, capture_output=True, timeout=60)
    url = f"http://127.0.0.1:{inst['port']}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if requests.get(url + "/health", timeout=2).status_code == 200:
                return url, m.name
        except requests.RequestException:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{vb.board_id}: service not ready at {url}")


@pytest.mark.parametrize("board_id", ["iq-8275-evk", "iq-9075-evk"])
def test_openai_client_on_a_virtual_board(module_boards, board_id):
    vb = module_boards.start(board_id)
    url, model = _serve(vb, module_boards.root)
    c = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=60)
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
