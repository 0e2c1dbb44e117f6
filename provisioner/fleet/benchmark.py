"""``fleet benchmark``: medians over repeated smoke runs, and each board's factory baseline taken with it.

The benchmark action (edge_llm.fleet.benchmark) repeats verify's smoke inference per model and
:func:`benchmark_summary` takes the medians, judging each run as ``fleet verify`` judges one
(:func:`provisioner.fleet.verify.smoke_check`).

Each board's performance baseline from the line is one such run right after the boot check. Why the
fleet's own benchmark, run from the station: the baseline must be measured exactly as `fleet
verify` measures the board later (same runtime invocation, same prompt and output length, same
parser), or "27.4 now against 32.1 at the factory" would compare two different things. So the
station hands the boards that just passed to the benchmark playbook (one run per model, no API
step: the service is not launched on the line), over SSH with strict host key checking against the
keys it recorded on their consoles minutes before, and records the figures as a ``baseline`` event of
each board's attempt (:func:`measure`). :mod:`provisioner.station.inventory_export` exports the latest
one as the host variable ``edge_llm_factory_baseline``; :func:`provisioner.fleet.verify.baseline_check`
judges it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from provisioner.contracts import inventory
from provisioner.fleet.verify import smoke_check

if TYPE_CHECKING:
    from provisioner.context import RunContext
    from provisioner.contracts.release import Release
    from provisioner.station.records import Records


@dataclass
class Measured:
    """One board's factory baseline, or why it could not be taken."""

    serial: str
    host: str
    baseline: dict[str, Any] | None = None
    error: str | None = None


def measure(records: Records, release: Release, attempts: Mapping[str, int], ctx: RunContext, *,
            addresses: Mapping[str, str], connection: Mapping[str, Any] | None = None,
            on_event: Callable[[dict[str, Any]], None] | None = None) -> list[Measured]:
    """Smoke-benchmark the boards of ``attempts`` (serial -> passed attempt id) once and record each result.

    ``connection`` holds this station's ``ansible_*`` settings for reaching boards (its SSH key, ...).
    The models measured are the release's (release.json), whatever the playbooks' group_vars say.
    """
    # imported here, not at the top: every board's worker of the benchmark action imports this module for
    # benchmark_summary, and the station's records and the runner are the station's, not the board's
    import yaml

    from provisioner.fleet.runner import FleetOptions, run_fleet
    from provisioner.station.inventory_export import BASELINE_STEP, write_inventory

    with tempfile.TemporaryDirectory(prefix="edge-llm-baseline-") as tmp:
        inv_path = Path(tmp) / "inventory.yml"
        inv = write_inventory(records, inv_path, dict(addresses))
        names = {hv.get("edge_llm_serial"): name for group in inv["all"]["children"].values()
                 for name, hv in group["hosts"].items()}
        hosts = {serial: names[serial] for serial in attempts if serial in names}
        if not hosts:
            return [Measured(s, "", error="not in the exported inventory (no passed attempt)") for s in attempts]
        inv.setdefault("all", {})["vars"] = {**dict(connection or {}),
                                             "edge_llm_models": inventory.models_from_release(release.models)}
        inv_path.write_text(yaml.safe_dump(inv, sort_keys=False), encoding="utf-8")
        report = run_fleet("benchmark", inv_path, ctx,
                           FleetOptions(limit=",".join(sorted(hosts.values())),
                                        extra_vars={"edge_llm_benchmark_runs": 1, "edge_llm_benchmark_api": False}),
                           on_event=on_event)
    rows = {r.board: r for r in report.rows}
    out = []
    for serial, host in sorted(hosts.items()):
        row = rows.get(host)
        bench = (row.details.get("benchmark") or {}) if row else {}
        model, fig = next(iter(sorted(bench.items())), (None, {}))
        dec, ttft = fig.get("median_decode_tok_s"), fig.get("median_ttft_s")
        if row is None or row.verdict != "pass" or model is None or not isinstance(dec, int | float) or dec <= 0:
            why = (row.reason if row else "") or "no decode figure from the smoke inference"
            records.add_event(attempts[serial], BASELINE_STEP, "error", detail={"error": why})
            out.append(Measured(serial, host, error=why))
            continue
        base = inventory.FactoryBaseline(model=str(model), decode_tok_s=float(dec),
                                         ttft_s=float(ttft) if isinstance(ttft, int | float) else None,
                                         max_drop=release.baseline_max_drop)
        records.add_event(attempts[serial], BASELINE_STEP, "stop", detail=base.as_vars())
        out.append(Measured(serial, host, baseline=base.as_vars()))
    return out + [Measured(s, "", error="not in the exported inventory") for s in attempts if s not in hosts]


def benchmark_summary(expect: inventory.HostVars, repeats: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Median decode tok/s and TTFT per model over repeated smoke runs (failed runs are counted, not averaged)."""
    import statistics

    out: dict[str, Any] = {}
    for m in expect.models:
        runs = repeats.get(m.name) or []
        figs = []
        for run in runs:
            check, fig = smoke_check(m, run, expect.prompt)
            figs.append({"ok": check.ok, "decode_tok_s": fig.get("decode_tok_s"), "ttft_s": fig.get("ttft_s"),
                         "detail": "" if check.ok else check.detail})
        decs = [f["decode_tok_s"] for f in figs if f["decode_tok_s"] is not None]
        ttfts = [f["ttft_s"] for f in figs if f["ttft_s"] is not None]
        out[m.name] = {"runs": figs, "n": len(figs), "failed": sum(1 for f in figs if not f["ok"]),
                       "median_decode_tok_s": round(statistics.median(decs), 2) if decs else None,
                       "median_ttft_s": round(statistics.median(ttfts), 4) if ttfts else None,
                       "min_decode_tok_s": m.min_decode_tok_s, "max_ttft_s": m.max_ttft_s}
    return out
