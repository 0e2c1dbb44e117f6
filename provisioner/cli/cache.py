"""`provisioner cache serve`: bitbake-hashserv + read-only HTTP sstate mirror, loopback unless --bind."""

from __future__ import annotations

from pathlib import Path

import click

from provisioner.ui import Reporter, print_json, stdout


@click.group("cache")
def command() -> None:
    """Shared build cache (sstate mirror + hash equivalence server)."""


@command.command("serve")
@click.option("--dir", "sstate_dir", type=click.Path(path_type=Path), default=None,
              help="SSTATE_DIR to share (default: sstate_dir from the build config, else ~/.cache/edge-llm/sstate).")
@click.option("--port", type=int, default=8080, show_default=True, help="HTTP port of the sstate mirror.")
@click.option("--hashserv-port", type=int, default=8686, show_default=True, help="bitbake-hashserv port.")
@click.option("--bind", default="127.0.0.1", show_default=True,
              help="Address the mirror and hash server listen on. Loopback serves this host only; a LAN address "
                   "(or 0.0.0.0) serves other hosts, with hash equivalence READ-ONLY there.")
@click.option("--write-bind", default="127.0.0.1", show_default=True,
              help="With a LAN --bind: address of a second, writable hash server for this host's own builds.")
@click.option("--write-port", type=int, default=None,
              help="Port of the writable hash server (default --hashserv-port + 1).")
@click.option("--advertise", default=None,
              help="Host name other build hosts use (default: this host's FQDN; with a loopback --bind, that address).")
@click.option("--db", type=click.Path(path_type=Path), default=None,
              help="Hash server database on LOCAL disk (default ~/.local/state/edge-llm/hashserv.db).")
@click.option("--bitbake", "bitbake_dir", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="A bitbake checkout whose bin/bitbake-hashserv to run (default: PATH, then KAS_WORK_DIR/bitbake).")
@click.option("--read-only-hashserv", is_flag=True, help="No address accepts new hashes (no writer at all).")
@click.option("--upstream", default=None, help="Upstream hash server to fall back to (host:port).")
@click.option("--json", "as_json", is_flag=True, help="Print the service description as JSON.")
def serve_cmd(sstate_dir: Path | None, port: int, hashserv_port: int, bind: str, write_bind: str,
              write_port: int | None, advertise: str | None, db: Path | None, bitbake_dir: Path | None,
              read_only_hashserv: bool, upstream: str | None, as_json: bool) -> None:
    """Serve this host's sstate and hash equivalence to other build hosts until Ctrl-C."""
    from provisioner import context
    from provisioner.image import cache
    from provisioner.image.host_config import load_host_config

    ctx = context.current()
    host = load_host_config(env=ctx.env)
    if sstate_dir is None:
        sstate_dir = Path(host.get("sstate_dir") or ctx.cache_dir / "sstate")
    work = host.get("work_dir") or ctx.cache_dir / "kas"
    exe = cache.find_hashserv(ctx.env, bitbake_dir=bitbake_dir, work_dir=Path(work))
    reporter = Reporter(quiet=as_json)

    def ready(svc: cache.CacheService) -> None:
        if as_json:
            print_json(svc.as_dict())
            return
        reporter.step(f"sstate mirror http://{cache.host_port(svc.bind, svc.http_port)}/ -> {svc.sstate_dir} "
                      "(read-only)")
        read = cache.host_port(svc.bind, svc.hashserv_port)
        if svc.write_hashserve == read:
            reporter.step(f"hash equivalence {read} (read-write, this host only; database {svc.db}, log {svc.log})")
        else:
            reporter.step(f"hash equivalence for other hosts {read} (read-only; database {svc.db}, log {svc.log})")
            if svc.write_hashserve:
                who = "this host only" if cache.is_loopback(svc.write_bind or "") else "anyone who reaches it"
                reporter.step(f"hash equivalence for this host's builds {svc.write_hashserve} (read-write, {who}; "
                              f"log {svc.write_log}): build.hashserve: {svc.write_hashserve}")
        if cache.is_loopback(svc.bind):
            reporter.info("Serving this host only; --bind <LAN address> serves other build hosts. Ctrl-C stops.")
        else:
            reporter.info("Other build hosts: paste this into the manifest or ~/.config/edge-llm/build.yaml; "
                          "Ctrl-C stops the servers.")
        stdout.print(svc.snippet(), markup=False, end="")

    cache.serve(sstate_dir, ctx.with_reporter(reporter),
                cache.CacheOptions(bind=bind, http_port=port, hashserv_port=hashserv_port, write_bind=write_bind,
                                   write_port=write_port, advertise=advertise, db=db, hashserv_exe=exe,
                                   read_only_hashserv=read_only_hashserv, upstream=upstream), on_ready=ready)
