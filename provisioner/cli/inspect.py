"""`provisioner inspect PATH`: what a model artifact is and whether it can run on a board."""

from __future__ import annotations

from pathlib import Path

import click

from provisioner import ui
from provisioner.artifacts.inspect import Inspection, inspect_path
from provisioner.errors import CheckFailed


def _mb(n: int | None) -> str:
    return "-" if n is None else f"{n:,} B ({n / 1e6:,.1f} MB)"


@click.command("inspect")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--board", "board_id", help="Say whether the artifact can run on this board (exit 1 if not).")
@click.option("--hash", "do_hash", is_flag=True, help="sha256 of every file (parallel).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def command(path: Path, board_id: str | None, do_hash: bool, as_json: bool) -> None:
    """Inspect a .litertlm file or a Genie bundle folder (reads only headers, not the weights)."""
    board = None
    if board_id:
        from provisioner import catalog  # YAML: only when a board is asked about

        board = catalog.board(board_id)
    ins = inspect_path(path, board)
    hashes: dict[str, str] = {}
    if do_hash:
        from provisioner.hashing import artifact_files, hash_files  # threads: only when asked

        if path.is_dir():  # only what the Genie reader confined to the bundle: no symlink out of it is read
            from provisioner.artifacts.genie import bundle_files

            named = {rel: p for rel, p in bundle_files(path.resolve()) if p is not None}
        else:
            named = {p.name: p for p in artifact_files(path)}
        found = hash_files(list(dict.fromkeys(named.values())), progress=not as_json and ui.stderr.is_terminal)
        hashes = {rel: found[p] for rel, p in named.items()}
    if as_json:
        ui.print_json({**ins.as_dict(), "sha256": hashes or None})
    else:
        _show(ins, hashes)
    if ins.problems:
        where = f" on {board.id}" if board else ""
        more = f" (+{len(ins.problems) - 1} more)" if len(ins.problems) > 1 else ""
        raise CheckFailed(f"{path}: cannot run{where}: {ins.problems[0]}{more}")


def _sampler(sampler: dict[str, object]) -> str:
    """``seed 42, temp 0.8, top-k 40, top-p 0.95`` in the config's own order and spelling."""
    return ", ".join(f"{k} {v}" for k, v in sampler.items()) or "-"


def _show(ins: Inspection, hashes: dict[str, str]) -> None:
    stdout, table = ui.stdout, ui.table
    d = ins.details
    rows = [
        ("kind", ins.kind + (f" (LiteRT-LM format {d.get('version')})" if ins.kind == "litertlm" else "")),
        ("path", ins.path),
        ("size", _mb(ins.size)),
    ]
    if ins.kind == "litertlm":
        rows += [("declared size", _mb(ins.declared_size)), ("truncated", "YES" if ins.truncated else "no"),
                 ("NPU only", "yes" if ins.npu_only else "no")]
    flavour = d.get("qairt_flavour") if ins.kind == "genie" else None
    rows += [
        ("QAIRT build", (", ".join(ins.qairt_builds) or "-") + (f" (flavour {flavour})" if flavour else "")),
        ("context size", ins.context_size or "-"),
        ("target SoC", ins.target_soc or "-"),
    ]
    if ins.kind == "genie":
        rows += [("dialog type", d.get("dialog_type") or "-"),
                 ("backend", d.get("backend") or "-"),
                 ("n-vocab", d.get("n_vocab") or "-"),
                 ("sampler", _sampler(d.get("sampler") or {})),
                 ("soc_model / dsp_arch", f"{ins.soc_model} / {ins.dsp_arch}"),
                 ("perf_profile", d.get("perf_profile") or "-"),
                 ("tool-versions qairt", d.get("tool_versions_qairt") or "-")]
    rows.append(("bytes read", _mb(ins.bytes_read)))
    stdout.print(table(f"{ins.path.name}", ["", ""], rows))
    if ins.kind == "litertlm":
        srows = []
        for s in d["sections"]:
            builds = sorted({op["qairt_build"] or "?" for op in s["dispatch_ops"]})
            srows.append((s["index"], s["data_type"], s["model_type"] or "", s["backend_constraint"] or "",
                          f"{s['begin']:,}..{s['end']:,}", len(s["dispatch_ops"]) or "",
                          ", ".join(builds), s["note"] or ""))
        stdout.print(table("sections", ["#", "type", "model_type", "backend", "bytes", "DISPATCH_OPs",
                                        "QAIRT", "note"], srows))
        if d.get("llm_metadata"):
            stdout.print(f"LLM metadata: {d['llm_metadata']}")
    else:
        if len(d.get("engines") or []) > 1:
            erows = [(e["where"], e["role"] or "-", e["backend"] or "?", e["processor"] or "?",
                      e["model_type"] or "?", len(e["files"])) for e in d["engines"]]
            stdout.print(table("engines", ["engine", "role", "backend", "runs on", "model", "files"], erows))
        frows = [(f["name"], f["role"], "MISSING" if f["size"] is None else f"{f['size']:,}",
                  "yes" if f["referenced"] else "no", f["qairt_build"] or "") for f in d["files"]]
        stdout.print(table("files", ["file", "role", "bytes", "referenced", "QAIRT"], frows))
    if hashes:
        stdout.print(table("sha256", ["file", "sha256"], sorted(hashes.items())))
    for w in ins.warnings:
        stdout.print(f"[yellow]warning:[/] {w}")
    if ins.board:
        if ins.ok:
            stdout.print(f"[green]can run on {ins.board}[/] (needs QAIRT {', '.join(ins.qairt_builds) or '?'})")
        else:
            stdout.print(f"[red]cannot run on {ins.board}:[/]")
    for p in ins.problems:
        stdout.print(f"  [red]-[/] {p}", markup=True, highlight=False)
