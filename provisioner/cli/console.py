"""`provisioner console PORT`: log in on a board's serial console and act on it (thin; the work
is in provisioner.station.console)."""

from __future__ import annotations

from pathlib import Path

import click

from provisioner import context
from provisioner.errors import CheckFailed
from provisioner.station.config import Credential, load_config
from provisioner.station.console import ConsoleDriver
from provisioner.ui import print_json, stdout, table


@click.command("console")
@click.argument("port")
@click.option("--login", is_flag=True, help="Log in (root) and stop there.")
@click.option("--run", "commands", multiple=True, help="Command to run (repeatable); exit status is reported.")
@click.option("--edl", is_flag=True, help="Put the running board into EDL (reboot edl).")
@click.option("--identity", is_flag=True, help="Read soc0 machine/soc_id, DT compatible, os-release, IP.")
@click.option("--download-mode", type=click.Choice(["0", "1"]), help="Set qcom_scm download_mode at runtime.")
@click.option("--baudrate", type=int, help="Default from station.yaml, else 115200.")
@click.option("--timeout", "timeout_s", type=float, default=15.0, show_default=True,
              help="Seconds to wait for a prompt.")
@click.option("--password-file", type=click.Path(path_type=Path), help="Read the root password from this file.")
@click.option("--config", type=click.Path(path_type=Path), help="station.yaml (default ./station.yaml).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def command(port: str, login: bool, commands: tuple[str, ...], edl: bool, identity: bool,
            download_mode: str | None, baudrate: int | None, timeout_s: float, password_file: Path | None,
            config: Path | None, as_json: bool) -> None:
    """Serial console automation on PORT (a tty, or a pyserial URL such as socket://host:port).

    The password comes from $PROVISIONER_CONSOLE_PASSWORD or --password-file and is never shown.
    """
    cfg = load_config(config)
    cred = Credential(env=None, file=password_file, user=cfg.credential.user) if password_file else cfg.credential
    out: dict = {"port": port}
    failed = []
    with ConsoleDriver(port, env=context.current().env, baudrate=baudrate or cfg.baudrate, credential=cred,
                       prompt_timeout_s=timeout_s) as con:
        con.ensure_shell()
        out["logged_in"] = True
        if download_mode is not None:
            out["download_mode"] = con.set_download_mode(int(download_mode))
        if commands:
            out["commands"] = []
            for cmd in commands:
                res = con.run(cmd, timeout_s=max(timeout_s, 30.0))
                out["commands"].append({"command": cmd, "status": res.status, "output": res.output})
                if not res.ok:
                    failed.append(cmd)
        if identity:
            out["identity"] = con.identity()
        if edl:
            con.reboot_edl()
            out["edl"] = "reboot edl sent"
    if as_json:
        print_json(out)
    else:
        stdout.print(f"{port}: logged in", markup=False)
        if "download_mode" in out:
            stdout.print(f"download_mode = {out['download_mode']}")
        for c in out.get("commands", []):
            stdout.print(f"$ {c['command']}  (exit {c['status']})", markup=False)
            if c["output"]:
                stdout.print(c["output"].rstrip("\n"), markup=False, highlight=False)
        if identity:
            i = out["identity"]
            stdout.print(table(f"identity on {port}", ["fact", "value"],
                               [(k, ", ".join(v) if isinstance(v, list) else v) for k, v in i.items()
                                if k != "os_release"]))
        if edl:
            stdout.print("reboot edl sent; the board should appear in `provisioner station scan`")
    if failed:
        raise CheckFailed(f"{len(failed)} command(s) failed on {port}: {', '.join(failed)}")
