"""The rehearsal's serving steps: one completion per board through its service, then the default eval
suite on every board (``provisioner fleet eval`` as a user runs it).

Only rehearse.py imports this module. The eval step reports scores and gates nothing (the built-in
manifests set no ``verify.eval``): it shows what a user's gate would see. The virtual IQ-8275 boards
generate their words with Google's real LiteRT-LM runtime on a tiny model with random weights, so their
low score is the truth about those words, and the step says so instead of hiding it.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import requests

from provisioner.rehearse_lanes import RehearsalError

if TYPE_CHECKING:
    from provisioner.rehearse import Rehearsal

MAX_CLIENTS = 32       # boards asked at once over HTTP (threads waiting on I/O)
#: why a board type's eval score says nothing about a real model (the virtual board's runtime, not a model)
RANDOM_WEIGHTS = {"iq-8275-evk": "Google's runtime on a tiny random-weight model"}


def step_completion(rh: Rehearsal) -> str:
    """One POST /v1/completions per healthy board, all boards at once: each board decodes on its own NPU,
    so a client waiting for one answer before asking the next board only adds up their latencies."""
    from provisioner.fleet.shared.serve_config import controller_token

    hosts = rh._inventory_hosts()

    def complete(name: str) -> tuple[str, dict[str, Any] | None, str | None]:
        hv = hosts[name]
        url = f"http://{hv['ansible_host']}:{hv['edge_llm_serve_port_base']}/v1/completions"
        token = controller_token(rh.inventory, name)      # where fleet launch put it; never printed
        if token is None:
            return name, None, f"no API token from fleet launch beside {rh.inventory}"
        try:
            resp = requests.post(url, json={"prompt": rh.o.prompt, "max_tokens": 32}, timeout=60,
                                 headers={"Authorization": f"Bearer {token}"})
            body = resp.json()
        except (requests.RequestException, ValueError) as exc:
            return name, None, str(exc)
        if resp.status_code != 200 or not body.get("choices"):
            return name, None, f"HTTP {resp.status_code} {str(body)[:120]}"
        return name, body, None

    names = rh._healthy_hosts()
    bad = []
    with ThreadPoolExecutor(max_workers=max(1, min(MAX_CLIENTS, len(names))),
                            thread_name_prefix="completion") as pool:
        for name, body, error in pool.map(complete, names):
            if error is not None:
                bad.append(f"{name}: {error}")
            elif body is not None:
                rh.completions[name] = body
    if bad:
        raise RehearsalError("completion failed on " + "; ".join(bad), "check `systemctl status` on the board")
    return f"{len(rh.completions)} completions answered"


def step_eval(rh: Rehearsal) -> str:
    """The shipped default suite on every healthy board; each board's score lands in its report row."""
    from provisioner.eval.suite import load_suite
    from provisioner.fleet.runner import FleetOptions
    from provisioner.fleet.shared.eval_report import run_eval

    suite = load_suite("default")
    report = run_eval(rh.inventory, suite, None, rh.ctx,
                      FleetOptions(limit=",".join(rh._healthy_hosts()), report_path=rh.work / "eval.json",
                                   log_path=rh.work / "eval.log"))
    by_type: dict[str, list[float]] = {}
    for s in report.scores:
        rh.eval_scores[s.board] = {"score": s.score, "passed": s.passed, "total": s.total}
        by_type.setdefault(s.type or "?", []).append(s.score)
    unscored = [r.board for r in report.fleet.rows if r.board not in rh.eval_scores]
    if unscored or not report.scores:
        raise RehearsalError(f"no eval score from {', '.join(unscored) or 'any board'}",
                             f"see {rh.work / 'eval.log'}")
    parts = []
    for kind, scores in sorted(by_type.items()):
        why = f" ({RANDOM_WEIGHTS[kind]})" if kind in RANDOM_WEIGHTS else ""
        parts.append(f"{kind} {sum(scores) / len(scores):.2f} on {len(scores)}{why}")
    return f"suite {suite.name} ({len(suite.cases)} cases), mean score: " + "; ".join(parts)
