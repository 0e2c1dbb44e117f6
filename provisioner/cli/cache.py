"""`provisioner cache serve`: bitbake-hashserv + read-only HTTP sstate mirror for other build hosts."""

from __future__ import annotations

import os
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
@click.option("--bind", default="0.0.0.0", show_default=True, help="Address both servers listen on.")
@click.option("--advertise", default=None, help="Host name other build hosts use (default: this host's FQDN).")
@click.option("--db", type=click.Path(path_type=Path), default=None,
              help="Hash server database on LOCAL disk (default ~/.local/state/edge-llm/hashserv.db).")
@click.option("--bitbake", "bitbake_dir", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="A bitbake checkout whose bin/bitbake-hashserv to run (default: PATH, then KAS_WORK_DIR/bitbake).")
@click.option("--read-only-hashserv", is_flag=True, help="Clients may query but not report new hashes.")
@click.option("--upstream", default=None, help="Upstream hash server to fall back to (host:port).")
@click.option("--json", "as_json", is_flag=True, help="Print the service description as JSON.")
def serve_cmd(sstate_dir: Path | None, port: int, hashserv_port: int, bind: str, advertise: str | None,
              db: Path | None, bitbake_dir: Path | None, read_only_hashserv: bool, upstream: str | None,
              as_json: bool) -> None:
    """Serve this host's sstate and hash equivalence to other build hosts until Ctrl-C."""
    from provisioner.image import cache
    from provisioner.image.build import load_host_config

    host = load_host_config()
    if sstate_dir is None:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        sstate_dir = Path(host.get("sstate_dir") or base / "edge-llm" / "sstate")
    work = host.get("work_dir") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "edge-llm" / "kas"
    exe = cache.find_hashserv(bitbake_dir=bitbake_dir, work_dir=Path(work))
    reporter = Reporter(quiet=as_json)

    def ready(svc: cache.CacheService) -> None:
        if as_json:
            print_json(svc.as_dict())
            return
        reporter.step(f"sstate mirror http://{svc.bind}:{svc.http_port}/ -> {svc.sstate_dir} (read-only)")
        reporter.step(f"bitbake-hashserv {svc.bind}:{svc.hashserv_port} (database {svc.db}, log {svc.log})")
        reporter.info("Other build hosts: paste this into the manifest or ~/.config/edge-llm/build.yaml; "
                      "Ctrl-C stops both servers.")
        stdout.print(svc.snippet(), markup=False, end="")

    cache.serve(sstate_dir, on_ready=ready, bind=bind, http_port=port, hashserv_port=hashserv_port,
                advertise=advertise, db=db, hashserv_exe=exe, read_only_hashserv=read_only_hashserv,
                upstream=upstream)
