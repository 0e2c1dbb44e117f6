"""`provisioner station`: scan, preflight, flash, history, forward, export-inventory, export-lava, dashboard (thin;
work is in provisioner.station)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from provisioner import context
from provisioner.errors import CheckFailed, StationError
from provisioner.station.bundle import preflight as run_preflight
from provisioner.station.config import StationConfig, load_config, load_slots
from provisioner.station.flash import flash_release, scan
from provisioner.station.history import OUTCOMES, history_reader, read_history
from provisioner.station.inventory_export import write_inventory
from provisioner.station.outbox import Central, Outbox, forward_once, forwarding
from provisioner.station.progress import LiveProgress
from provisioner.station.records import Records
from provisioner.station.strategy import FlashOptions
from provisioner.ui import Reporter, print_json, stderr, stdout, table


def _config(config: Path | None, sysfs_root: Path | None = None, slots: Path | None = None, qdl: str | None = None,
            db: Path | None = None) -> StationConfig:
    cfg = load_config(config)
    if sysfs_root:
        cfg.sysfs_root = sysfs_root
    if slots:
        cfg.slots.update(load_slots(slots))
    if qdl:
        cfg.qdl = qdl
    if db:
        cfg.database = db
    return cfg


def _console_pairs(pairs: tuple[str, ...]) -> dict[str, str]:
    """``--console 0AA94EFD=/dev/ttyUSB3`` -> {"0AA94EFD": "/dev/ttyUSB3"}; keys as in station.yaml."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, tty = pair.partition("=")
        if not sep or not key.strip() or not tty.strip():
            raise StationError(f"--console {pair!r} is not BOARD=TTY",
                               "give a board serial, slot name or USB port path, '=', and the tty, "
                               "e.g. --console 0AA94EFD=/dev/ttyUSB3")
        out[key.strip()] = tty.strip()
    return out


_config_opt = click.option("--config", type=click.Path(path_type=Path), help="station.yaml (default ./station.yaml).")
_json_opt = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
_db_opt = click.option("--db", type=click.Path(path_type=Path), help="Records database (default from config).")


@click.group("station")
def command() -> None:
    """Factory station: find boards in EDL, check a bundle, flash many boards, keep records."""


@command.command("scan")
@_config_opt
@click.option("--sysfs-root", type=click.Path(path_type=Path), help="sysfs to read (default /sys).")
@click.option("--slots", type=click.Path(path_type=Path, exists=True), help="YAML: USB port path -> slot name.")
@click.option("--console", "consoles", multiple=True, help="Serial console to identify a running board (repeatable).")
@_db_opt
@_json_opt
def scan_cmd(config: Path | None, sysfs_root: Path | None, slots: Path | None, consoles: tuple[str, ...],
             db: Path | None, as_json: bool) -> None:
    """Boards in EDL (05c6:9008) or crash-dump mode (900e), and boards answering on consoles.

    Seen boards are recorded when a database is configured (station.yaml or --db).
    """
    cfg = _config(config, sysfs_root, slots, db=db)
    if db or cfg.source is not None:
        with Records(cfg.database, writer=False) as records:
            result = scan(cfg, list(consoles), env=context.current().env, records=records)
    else:
        result = scan(cfg, list(consoles), env=context.current().env)
    if as_json:
        print_json(result.as_dict())
        return
    rows = [(d.slot or d.port, d.port, d.serial, d.mode, d.product) for d in result.devices]
    stdout.print(table(f"USB (sysfs {cfg.sysfs_root})", ["slot", "port", "serial", "mode", "product"], rows))
    if not result.devices:
        stdout.print("no boards in EDL or crash-dump mode")
    if result.consoles:
        crow = []
        for c in result.consoles:
            i = c.identity or {}
            crow.append((c.port, i.get("serial"), c.board, i.get("machine"), i.get("build_id"), i.get("ip"),
                         c.error))
        stdout.print(table("consoles", ["port", "serial", "board", "machine", "BUILD_ID", "ip", "error"], crow))


@command.command("preflight")
@click.argument("release", type=click.Path(path_type=Path))
@click.option("--board", "board_id", help="Board id (default: the release's board).")
@click.option("--no-hash", is_flag=True, help="Check sizes only: no sha256, no file read past its header.")
@_json_opt
def preflight_cmd(release: Path, board_id: str | None, no_hash: bool, as_json: bool) -> None:
    """Check a release / bundle / .qcomflash.tar.gz before flashing (nothing touches a board)."""
    pf = run_preflight(release, board_id, hash_files=not no_hash)
    try:
        if as_json:
            print_json(pf.as_dict())
        else:
            stdout.print(table(f"preflight {pf.release_id} for {pf.board.id}", ["check", "ok", "detail"],
                               [(c.name, "NO" if not c.ok else "warn" if c.warning else "yes", c.detail)
                                for c in pf.checks]))
        pf.raise_for_problems()
    finally:
        pf.close()


@command.command("flash")
@click.argument("release", type=click.Path(path_type=Path))
@click.option("--serial", "serials", multiple=True, help="Board serial to flash (repeatable).")
@click.option("--all", "all_boards", is_flag=True, help="Every board in EDL.")
@click.option("--board", "board_id", help="Board id (default: the release's board).")
@click.option("--jobs", type=click.IntRange(1, 64), help="Boards flashed at once (default: all).")
@click.option("--timeout", "timeout_s", type=float, default=FlashOptions.timeout_s, show_default=True,
              help="Seconds per qdl run.")
@click.option("--retries", type=click.IntRange(0, 10), default=FlashOptions.retries, show_default=True,
              help="Extra qdl runs after a transient USB error.")
@click.option("--reappear-timeout", type=float, default=FlashOptions.reappear_timeout_s, show_default=True,
              help="Seconds to wait for a dropped board to re-enter EDL.")
@click.option("--boot-check", is_flag=True, help="Watch the console after flashing and verify the release booted.")
@click.option("--boot-timeout", type=float, default=FlashOptions.boot_timeout_s, show_default=True)
@click.option("--console", "consoles", multiple=True, metavar="BOARD=TTY",
              help="Console of a board (serial, slot or USB port path = tty); repeatable, overrides station.yaml.")
@click.option("--allow-old-qdl", is_flag=True, help="Allow one board alone with a qdl that has no --serial.")
@click.option("--qdl", help="qdl executable (default from config, else 'qdl' on PATH).")
@click.option("--sysfs-root", type=click.Path(path_type=Path))
@_db_opt
@_config_opt
@_json_opt
def flash_cmd(release: Path, serials: tuple[str, ...], all_boards: bool, board_id: str | None, jobs: int | None,
              timeout_s: float, retries: int, reappear_timeout: float, boot_check: bool, boot_timeout: float,
              consoles: tuple[str, ...], allow_old_qdl: bool, qdl: str | None, sysfs_root: Path | None,
              db: Path | None, config: Path | None, as_json: bool) -> None:
    """Preflight RELEASE, then flash the selected boards in parallel (one qdl --serial each)."""
    if serials and all_boards:
        raise StationError("--serial and --all are exclusive", "pick one")
    cfg = _config(config, sysfs_root, None, qdl, db)
    cfg.consoles.update(_console_pairs(consoles))
    options = FlashOptions(serials=tuple(serials), all_boards=all_boards, board_id=board_id, jobs=jobs,
                           timeout_s=timeout_s, retries=retries, reappear_timeout_s=reappear_timeout,
                           boot_timeout_s=boot_timeout, boot_check=boot_check, allow_old_qdl=allow_old_qdl)
    rep = Reporter(quiet=as_json)
    ctx = context.current(rep)
    # the central history (if any) is fed from the local database in the background: never waited for
    with Records(cfg.database) as records, forwarding(cfg.database, cfg.central, ctx.env, report=rep.warn) as fwd:
        for note in records.recovery_notes:  # attempts an earlier crash left open, settled at open
            rep.warn(note)
        progress = LiveProgress(stderr, list(serials)) if not as_json else None
        if progress:
            with progress:
                run = flash_release(release, cfg, ctx, options, listener=progress, records=records)
        else:
            run = flash_release(release, cfg, ctx, options, records=records)
        if cfg.baseline and boot_check:
            _factory_baselines(release, cfg, run, records, rep)
    if fwd is not None and fwd.status.backlog:
        rep.warn(f"central records {cfg.central.describe()}: {fwd.status.backlog} attempt(s) wait in the local "
                 "outbox; they are sent by the next run or `provisioner station forward`")
    if as_json:
        print_json(run.as_dict())
    else:
        rows = [(r.slot, r.serial, r.state, "ok" if r.ok else "FAILED", f"{r.duration_s:.1f}", r.tries,
                 f"{r.rate_kbs:.0f}" if r.rate_kbs else "", r.error or r.log_path) for r in run.results]
        stdout.print(table(f"flash {run.release} ({run.qdl.describe()})",
                           ["slot", "serial", "state", "result", "s", "tries", "max kB/s", "error / log"], rows))
    if not run.ok:
        bad = run.failed
        raise CheckFailed(f"{len(bad)} of {len(run.results)} board(s) failed: "
                          + "; ".join(f"{r.serial}: {r.error}" for r in bad[:3]),
                          "see the per-board logs; fix and flash those boards again")


def _factory_baselines(release: Path, cfg: StationConfig, run: Any, records: Records, rep: Reporter) -> None:
    """station.yaml ``baseline``: one smoke inference per board that passed (provisioner.fleet.benchmark)."""
    from provisioner.contracts.release import load_release
    from provisioner.fleet.benchmark import measure

    attempts = {r.serial: r.attempt_id for r in run.results if r.ok and r.attempt_id is not None}
    if not attempts:
        return
    rep.step(f"factory baseline: one smoke inference on {len(attempts)} board(s)")
    with load_release(release, hash_files=False) as rel:
        for m in measure(records, rel, attempts, context.current(rep), addresses=cfg.addresses,
                         connection=cfg.baseline_connection):
            if m.baseline:
                b = m.baseline
                ttft = f", TTFT {b['ttft_s']:.2f} s" if b.get("ttft_s") is not None else ""
                rep.info(f"baseline {m.serial} ({m.host}): {b['model']} {b['decode_tok_s']:.1f} tok/s{ttft}")
            else:
                rep.warn(f"baseline {m.serial}: not measured ({m.error})")


@command.command("history")
@click.option("--serial", help="Only this board.")
@click.option("--release", help="Only this release id.")
@click.option("--outcome", type=click.Choice(OUTCOMES), help="Only attempts that ended so.")
@click.option("--station", "station_name", help="Only this station (central history).")
@click.option("--local", is_flag=True, help="This station's own database even when a central one is configured.")
@click.option("--limit", type=click.IntRange(1), default=500, show_default=True, help="Newest N attempts.")
@_db_opt
@_config_opt
@_json_opt
def history_cmd(serial: str | None, release: str | None, outcome: str | None, station_name: str | None,
                local: bool, limit: int, db: Path | None, config: Path | None, as_json: bool) -> None:
    """Flash attempts, newest first: every station's when station.yaml names a central database."""
    cfg = _config(config, db=db)
    hist = read_history(cfg, serial=serial, release=release, outcome=outcome, station=station_name, limit=limit,
                        local=local, env=context.current().env)
    rows = hist.rows
    if as_json:
        print_json(rows)
        return
    stdout.print(table(f"station history ({hist.source}: {hist.where})",
                       ["station", "id", "serial", "slot", "release", "qdl", "state", "result", "s", "error", "log"],
                       [tuple(r.get(k) for k in ("station", "id", "serial", "slot", "release_id", "qdl_version",
                                                 "state", "result", "duration_s", "error", "log_path")) for r in rows]))
    if hist.malformed:
        stdout.print(f"({hist.malformed} central row(s) skipped: not a station's attempt record)")
    if hist.truncated:
        stdout.print(f"(newest {limit} shown; --limit for more)")


@command.command("forward")
@_db_opt
@_config_opt
@_json_opt
def forward_cmd(db: Path | None, config: Path | None, as_json: bool) -> None:
    """Send this station's attempts the central database has not confirmed yet (the outbox)."""
    cfg = _config(config, db=db)
    if cfg.central is None:
        raise StationError("no central records database configured",
                           "set records: postgresql://... in station.yaml")
    if not cfg.database.is_file():
        raise StationError(f"no station database at {cfg.database}", "flash a board first or pass --db")
    with Records(cfg.database, writer=False):
        pass  # settles attempts a dead station left running, so they are forwarded too
    outbox, central = Outbox(cfg.database), Central(cfg.central, context.current().env)
    try:
        st = forward_once(outbox, central)
    finally:
        central.close()
        outbox.close()
    if as_json:
        print_json({"sent": st.sent, "duplicates": st.duplicates, "backlog": st.backlog,
                    "refused": {str(k): v for k, v in st.refused.items()}})
    else:
        for aid, error in st.refused.items():
            stdout.print(f"attempt {aid} refused ({error}): set aside, it stays in this station's history only",
                         markup=False)
        stdout.print(f"{cfg.central.describe()}: {st.sent} attempt(s) sent, {st.duplicates} already there, "
                     f"{st.backlog} waiting")


@command.command("export-inventory")
@click.option("--out", type=click.Path(path_type=Path), help="Write the YAML here (default: stdout).")
@click.option("--address", "addresses", multiple=True, help="serial=host[:port] (repeatable).")
@_db_opt
@_config_opt
@_json_opt
def export_inventory_cmd(out: Path | None, addresses: tuple[str, ...], db: Path | None, config: Path | None,
                         as_json: bool) -> None:
    """Ansible inventory of boards that passed, grouped per board type (iq_8275_evk, ...)."""
    from provisioner.contracts.inventory import dump_inventory
    from provisioner.station.inventory_export import build_inventory, known_hosts_for, parse_address

    cfg = _config(config, db=db)
    if not cfg.database.is_file():
        raise StationError(f"no station database at {cfg.database}", "flash a board first or pass --db")
    amap = dict(cfg.addresses)
    for a in addresses:
        key, sep, value = a.partition("=")
        if not sep or not value:
            raise StationError(f"--address {a!r} is not serial=host[:port]", "e.g. --address 0AA94EFD=10.0.0.7:22")
        amap[key.upper()] = value
    for serial, value in amap.items():
        parse_address(serial, value)   # every one checked now, not only those of boards that passed
    with Records(cfg.database, writer=False) as records:
        inv = write_inventory(records, out, amap) if out else build_inventory(records, amap)
    if as_json:
        print_json(inv)
    elif out:
        n = sum(len(g["hosts"]) for g in inv["all"]["children"].values())
        stdout.print(f"wrote {out}: {n} board(s) in {len(inv['all']['children'])} group(s); their SSH host keys "
                     f"as recorded on the line in {known_hosts_for(out)}")
    else:
        stdout.print(dump_inventory(inv), markup=False, highlight=False)


@command.command("dashboard")
@click.option("--bind", default="127.0.0.1", show_default=True,
              help="Address to listen on. Loopback serves this host only; a LAN address (or 0.0.0.0) needs a token.")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True)
@click.option("--token-file", type=click.Path(path_type=Path),
              help="File holding the token a browser must give on a LAN bind (or set PROVISIONER_DASHBOARD_TOKEN).")
@_db_opt
@_config_opt
def dashboard_cmd(bind: str, port: int, token_file: Path | None, db: Path | None, config: Path | None) -> None:
    """A live web page of this station's slots and its history (read-only) until Ctrl-C."""
    from provisioner.image.cache import is_loopback
    from provisioner.station.dashboard import DashboardSettings, serve

    cfg = _config(config, db=db)
    token = _dashboard_token(token_file)
    if not is_loopback(bind) and not token:
        raise StationError(f"--bind {bind} serves the dashboard to the network, and no token is set",
                           "write a token of 16+ characters to a file for --token-file (or set "
                           "PROVISIONER_DASHBOARD_TOKEN), or drop --bind to serve this host only")
    settings = DashboardSettings(bind=bind, port=port, loopback=is_loopback(bind), token=token)
    rep = Reporter()

    def ready(url: str) -> None:
        rep.step(f"station dashboard at {url} (records {cfg.database}, sysfs {cfg.sysfs_root})")
        who = "Browsers log in with the token. " if token else "This host only. "
        rep.info(f"Read-only. {who}Ctrl-C stops.")

    env = context.current().env
    serve(cfg, settings, on_ready=ready, reader=history_reader(cfg, env), searcher=history_reader(cfg, env))


def _dashboard_token(token_file: Path | None) -> str | None:
    """The dashboard token from --token-file or the environment; never from argv, never printed."""
    from provisioner.station.dashboard import MIN_TOKEN_CHARS

    if token_file is not None:
        from provisioner.station.secret_file import read_secret_file

        token = read_secret_file(token_file, "dashboard token file", "give a readable file holding the token").strip()
        source = f"token file {token_file}"
    else:
        token = (context.current().get("PROVISIONER_DASHBOARD_TOKEN") or "").strip()
        source = "PROVISIONER_DASHBOARD_TOKEN"
    if token and (len(token) < MIN_TOKEN_CHARS or not token.isprintable()):
        raise StationError(f"the dashboard token in {source} is shorter than {MIN_TOKEN_CHARS} characters "
                           "or not printable", "use e.g. `openssl rand -hex 16`")
    return token or None


@command.command("export-lava")
@click.argument("release", type=click.Path(path_type=Path))
@click.option("--url-base", required=True, help="Where LAVA workers download release tarballs "
              "(<url-base>/<release>/<image>-<machine>.qcomflash.tar.gz).")
@click.option("--out", type=click.Path(path_type=Path), default=Path("lava"), show_default=True,
              help="Folder for the job files (one per board type of the release).")
@_json_opt
def export_lava_cmd(release: Path, url_base: str, out: Path, as_json: bool) -> None:
    """LAVA job definitions (deploy to: qdl, boot qdl + minimal, banner test) for a release."""
    from provisioner.station.lava import export

    paths = export(release, url_base, out)
    if as_json:
        print_json({"jobs": [str(p) for p in paths]})
    else:
        for p in paths:
            stdout.print(f"wrote {p}")
