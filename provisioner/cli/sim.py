"""`provisioner sim`: virtual EVKs for rehearsals and tests (no hardware needed).

Thin layer over :mod:`provisioner.sim.control`; every subcommand that reports has ``--json``.
"""

from __future__ import annotations

from pathlib import Path

import click

from provisioner.ui import Reporter, print_json, stdout, table

ROOT_OPT = click.option("--root", type=click.Path(file_okay=False, path_type=Path), default=None,
                        help="Sim root (default $PROVISIONER_SIM_ROOT or /var/tmp/edge-llm-sim).")


@click.group("sim")
def command() -> None:
    """Virtual IQ-8275/IQ-9075 EVKs: EDL over a fake sysfs, a qdl stand-in, serial consoles, SSH."""


@command.command("up")
@click.argument("count", type=int)
@click.option("--board", "board_id", required=True, help="Board type, e.g. iq-8275-evk.")
@click.option("--fault", "faults", multiple=True, help="Inject a fault (repeatable), e.g. --fault slow.")
@click.option("--state", type=click.Choice(["booted", "edl", "off"]), default="booted", show_default=True,
              help="booted: factory-install a synthetic image and boot; edl: wait in EDL for a station.")
@click.option("--manifest", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="Release manifest whose synthetic image booted boards get (default: built-in example).")
@click.option("--inventory", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the Ansible inventory of all booted boards here (also <root>/inventory.yml).")
@click.option("--timeout", "timeout_s", type=float, default=None,
              help="Seconds to wait for boot (default: 120, or 1 s per board for larger fleets).")
@ROOT_OPT
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def up_cmd(count: int, board_id: str, faults: tuple[str, ...], state: str, manifest: Path | None,
           inventory: Path | None, timeout_s: float | None, root: Path | None, as_json: bool) -> None:
    """Add COUNT virtual boards (repeat to add more)."""
    import time

    from provisioner.sim import control
    from provisioner.sim.board import check_faults

    check_faults(faults)
    rep = Reporter(quiet=as_json)
    rep.step(f"bringing up {count} x {board_id} ({state})")
    t0 = time.monotonic()
    res = control.up(count, board_id, root=root, faults=faults, state=state, manifest=manifest,
                     inventory=inventory, timeout_s=timeout_s)
    took = time.monotonic() - t0
    if as_json:
        print_json({**res.as_dict(), "elapsed_s": round(took, 1)})
        return
    _board_table([b.data for b in res.boards])
    rep.info(f"{count} board(s) {state} in {took:.1f} s ({took / count:.2f} s per board)")
    if res.inventory:
        rep.info(f"inventory: {res.inventory}")


def _board_table(rows: list[dict]) -> None:
    stdout.print(table("virtual boards", ["serial", "board", "slot", "state", "ssh", "console", "build", "faults"], [
        (d["serial"], d["board"], d["slot"], d["state"],
         f"{d['ssh']['host']}:{d['ssh']['port']}" if d.get("ssh") else "-", d.get("console") or "-",
         d.get("build_id") or "-", ",".join(d.get("faults") or []) or "-") for d in rows]))


@command.command("status")
@ROOT_OPT
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status_cmd(root: Path | None, as_json: bool) -> None:
    """Show the sim root: supervisor and every board's state, address and console."""
    from provisioner.sim import supervisor

    st = supervisor.status(root)
    if as_json:
        print_json(st)
        return
    stdout.print(f"sim root {st['root']}: supervisor {st['supervisor'] or 'not running'}")
    _board_table(st["boards"])


@command.command("down")
@ROOT_OPT
@click.option("--purge", is_flag=True, help="Also delete the cached synthetic images.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def down_cmd(root: Path | None, purge: bool, as_json: bool) -> None:
    """Stop and remove every virtual board (supervisor, sshd, mounts, USB entries)."""
    from provisioner.sim import control

    rep = control.down(root, keep_cache=not purge)
    if as_json:
        print_json(rep)
    else:
        Reporter().info(f"removed {rep['boards']} board(s) from {rep['root']}")


def _action(name: str, help_text: str):
    @command.command(name, help=help_text)
    @click.argument("board")
    @ROOT_OPT
    @click.option("--wait/--no-wait", default=True, help="Wait until the board settles (boot only).")
    @click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
    def _cmd(board: str, root: Path | None, wait: bool, as_json: bool) -> None:
        from provisioner.sim import control, supervisor

        vb = control.find_board(root, board)
        fn = {"edl": control.enter_edl, "boot": control.power_cycle, "crash": control.cdsp_crash,
              "off": control.power_off}[name]
        fn(vb)
        if name != "off":
            supervisor.ensure_running(vb.root)
        if wait and name == "boot":
            supervisor.wait_for_state(vb, ("booted",), 120)
        if as_json:
            print_json(control._public(vb))
        else:
            Reporter().info(f"{vb.serial} ({vb.slot}): {vb.reload().state}")
    return _cmd


_action("edl", "Power-cycle BOARD (serial or slot) into EDL (05c6:9008).")
_action("boot", "Power-cycle BOARD so it boots what is flashed.")
_action("crash", "Trigger a cDSP fatal error on BOARD (ramdump with download_mode=1, else reboot).")
_action("off", "Power BOARD off.")


@command.command("fault")
@click.argument("board")
@click.argument("fault")
@click.option("--clear", is_flag=True, help="Remove the fault instead of adding it.")
@ROOT_OPT
def fault_cmd(board: str, fault: str, clear: bool, root: Path | None) -> None:
    """Add (or --clear) FAULT on BOARD; most take effect at the next boot or run."""
    from provisioner.sim import control

    vb = control.find_board(root, board)
    (vb.clear_fault if clear else vb.add_fault)(fault)
    Reporter().info(f"{vb.serial}: faults {','.join(vb.faults) or '-'}")


@command.command("inventory")
@ROOT_OPT
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None)
def inventory_cmd(root: Path | None, out: Path | None) -> None:
    """(Re)write the Ansible inventory of the booted boards."""
    from provisioner.sim import control

    stdout.print(str(control.write_inventory(root or control.sim_root(None), out)))
