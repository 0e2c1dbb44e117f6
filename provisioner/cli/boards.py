"""`provisioner boards`: the board catalog, for people and machines."""

from __future__ import annotations

import click

from provisioner import catalog
from provisioner.ui import print_json, stdout, table


@click.command("boards")
@click.argument("board_id", required=False)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def command(board_id: str | None, as_json: bool) -> None:
    """List supported boards, or show every fact about BOARD_ID."""
    boards = [catalog.board(board_id)] if board_id else list(catalog.boards().values())
    if as_json:
        print_json([b.as_dict() for b in boards] if not board_id else boards[0].as_dict())
        return
    if board_id:
        b = boards[0]
        rows = [(k, v) for k, v in b.as_dict().items() if k != "performance"]
        stdout.print(table(f"{b.name} ({b.id})", ["fact", "value"], rows))
        perf = [(p.model, p.os, p.decode_tok_s, p.ttft_s, p.prefill_tok_s, p.init_s) for p in b.performance]
        stdout.print(table("measured speeds (acceptance reference)",
                           ["model", "os", "decode tok/s", "TTFT s", "prefill tok/s", "init s"], perf))
        return
    rows = [
        (b.id, b.name, b.soc, b.soc0_machine, b.soc_id, b.hexagon_arch, b.qnn_soc_model, b.kas_machine,
         f"{b.storage_type.upper()} {b.sector_size}B", b.qairt_skel_dir)
        for b in boards
    ]
    stdout.print(table("boards", ["id", "name", "SoC", "soc0 machine", "soc_id", "Hexagon", "soc_model",
                                  "kas machine", "storage", "skel dir"], rows))
