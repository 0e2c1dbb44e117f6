"""Start edge-llm-serve on a virtual board the way `fleet launch` installs it (tests and bench/serve.py).

The unit, config and drop-in come from ``fleet.launch.units``, the production planner, so a test
client reaches the service through the same files a real board gets.
"""

from __future__ import annotations

import json
import secrets
import shlex
import subprocess
import time
from pathlib import Path

import requests

from provisioner import catalog
from provisioner.contracts.inventory import HostVars, ModelVars
from provisioner.fleet import launch
from provisioner.manifest import load_manifest
from provisioner.sim import control, host, ports


def start_service(vb, root: Path, *, ready_timeout_s: float = 120) -> tuple[str, str, str]:
    """Install and start the board's first model's service; returns (base url, model, bearer token). Raises
    RuntimeError naming the URL when /health does not answer 200 in time.

    The token file is written as fleet launch leaves it (the service user's, 0600): edge-llm-serve
    refuses to start without one. The token travels over ssh's stdin, never in an argv."""
    m = load_manifest(control.builtin_manifest(root, vb.board_id)).models[0]
    mv = ModelVars(name=m.name, kind=m.kind, runtime=m.runtime, qairt=catalog.normalize_qairt(m.qairt),
                   chat_template=m.chat_template or "plain", file=Path(m.path).name if m.kind == "litertlm" else None)
    plan = launch.units(HostVars(board=catalog.board(vb.board_id), models=(mv,)), port_base=ports.serve_port_base(vb))
    inst = plan["instances"][0]
    files = {plan["unit_path"]: plan["unit_text"], inst["config_path"]: json.dumps(inst["config"]) + "\n",
             inst["dropin_path"]: inst["dropin"]}
    script = "; ".join(f"mkdir -p {shlex.quote(str(Path(p).parent))} && printf %s {shlex.quote(t)} > {p}"
                       for p, t in files.items())
    script += f"; systemctl daemon-reload && systemctl start {inst['unit']} </dev/null >/dev/null 2>&1"
    token = secrets.token_urlsafe(32)
    tok = shlex.quote(plan["token_file"])
    user = shlex.quote(HostVars(board=catalog.board(vb.board_id), models=(mv,)).serve_user)
    subprocess.run(host.ssh_argv(vb, f"mkdir -p $(dirname {tok}) && umask 077 && cat > {tok} && chown {user} {tok}"),
                   input=token, text=True, check=True, capture_output=True, timeout=60)
    subprocess.run(host.ssh_argv(vb, script), check=True, capture_output=True, timeout=60)
    url = f"http://127.0.0.1:{inst['port']}"
    deadline = time.monotonic() + ready_timeout_s
    while time.monotonic() < deadline:
        try:
            if requests.get(url + "/health", timeout=2).status_code == 200:
                return url, m.name, token
        except requests.RequestException:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{vb.board_id}: service not ready at {url}")
