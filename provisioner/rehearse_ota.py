"""``provisioner rehearse --ota``: a whole-image update on the rehearsal's boards, end to end.

After the normal rehearsal has flashed and launched its boards, each lane (board type) gets:

1. a *base* OSTree commit of the image the boards were flashed with and a *second release* that
   changes only the runtime (a new ``edge-llm-serve`` build under ``/usr/bin``; ``/opt`` is not in an
   OSTree commit, meta-updater image_types_ostree.bbclass @ f0e1ccaf drops it), both committed by the
   simulator's stand-in for meta-updater's ``IMAGE_CMD:ostreecommit`` (:mod:`provisioner.sim.ostree_image`,
   the real ``ostree``), collected into release folders as ``build`` does;
2. both published with the production ``provisioner ota publish`` code into one static repository
   (the second publish adds the static delta from the flashed commit);
3. the boards turned into OSTree boards running the base commit (what flashing a sota image gives;
   :mod:`provisioner.sim.ostree_board`, real ``ostree admin`` sysroots);
4. the production ``fleet update-os`` (ansible-playbook update-os.yml) against the repository served
   over HTTP on the loopback; the per-board outcome goes into the rehearsal report.

Only rehearse.py imports this module (it may import the simulator, like rehearse.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

from provisioner.contracts import board as on_board
from provisioner.contracts.release_document import OtaEntry, ReleaseDocument, read_release_json, write_release_json
from provisioner.steps import Step

if TYPE_CHECKING:
    from provisioner.rehearse import Lane, Rehearsal

IMAGE = "qcom-multimedia-image"
RUNTIME_FILE = "usr/bin/edge-llm-serve"      # what the runtime-only change rebuilds
# the virtual board's side of update-os: its reboot as provisioner.sim.host provides it
SIM_VARS = {"edge_llm_update_os_reboot_command": "/run/edge-llm-sim/reboot",
            "edge_llm_update_os_reboot_timeout": 60}


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        """The boards' GETs would interleave with the step output."""


class OtaRehearsal:
    """The OTA steps over the rehearsal's lanes, boards and inventory."""

    def __init__(self, rehearsal: Rehearsal) -> None:
        self.r = rehearsal
        self.dir = rehearsal.work / "ota"
        self.repo = self.dir / "repo"
        self.base: dict[str, tuple[Path, str]] = {}      # lane release -> (release folder, commit)
        self.new: dict[str, tuple[Path, str]] = {}
        self.rows: dict[str, dict[str, Any]] = {}        # inventory host -> update-os outcome

    def steps(self) -> list[Step]:
        return [
            Step("ota release", self.step_release, simulated=True,
                 what="base + runtime-only release as OSTree commits (sim's ostreecommit builder, real ostree)"),
            Step("ota publish", self.step_publish,
                 what="provisioner ota publish: static archive repo, static delta from the flashed commit"),
            Step("ota boards", self.step_boards, cleanup=self.cleanup, simulated=True,
                 what="boards become OSTree boards running the flashed commit (real `ostree admin` sysroots)"),
            Step("fleet update-os", self.step_update, simulated=True,
                 what="ansible-playbook update-os.yml: pull (delta), reboot, health gate, commit or roll back"),
        ]

    # ------------------------------------------------------------------ steps
    def step_release(self) -> str:
        from provisioner.rehearse import RehearsalError

        if not shutil.which("ostree"):
            raise RehearsalError("--ota needs the ostree CLI (commits, the published repo, board sysroots)",
                                 "apt-get install -y ostree")
        # Every rehearsal builds its two releases anew, and a new build is a new commit (commit time,
        # parent), while `ota publish` holds a release id to the one commit it first published. So the
        # rehearsal's OTA folder (its build repo, release folders and published repository, nothing a board
        # boots from) starts empty, as its freshly flashed boards do: a rerun in the same work dir is clean.
        shutil.rmtree(self.dir, ignore_errors=True)
        out = []
        for lane in self.r.lanes:
            rootfs = self._rootfs(lane)
            base_id = lane.manifest.release
            new_id = f"{base_id}-ota1"
            runtime = (rootfs / RUNTIME_FILE).read_bytes()
            change = {RUNTIME_FILE: runtime + f"\n# rebuilt for {new_id}\n".encode()}
            self.base[base_id] = self._release(lane, base_id, rootfs, {})
            self.new[base_id] = self._release(lane, new_id, rootfs, change)
            out.append(f"{base_id} {self.base[base_id][1][:12]} -> {new_id} {self.new[base_id][1][:12]}")
        return "; ".join(out)

    def step_publish(self) -> str:
        from provisioner.ota.publish import publish

        out = []
        for lane in self.r.lanes:
            release = lane.manifest.release
            publish(self.base[release][0], self.repo, self.r.ctx)
            res = publish(self.new[release][0], self.repo, self.r.ctx)
            out.append(f"{res.release}: delta from {', '.join(d[:12] for d in res.deltas) or 'none'}")
        return f"{self.repo}: " + "; ".join(out)

    def step_boards(self) -> str:
        from provisioner.sim import host, ostree_board
        from provisioner.sim.board import VirtualBoard

        n = 0
        for lane in self.r.lanes:
            commit = self.base[lane.manifest.release][1]
            for serial in lane.serials:
                board = VirtualBoard.load(self.r.sim_root, serial)
                host.stop_host(board)
                ostree_board.init_sysroot(board, self.repo, lane.board.kas_machine, commit)
                keep_board_etc(board.rootfs_dir, ostree_board.sysroot(board) / "ostree/deploy" /
                               ostree_board.OSNAME / "deploy")
                host.start_host(board)
                n += 1
        self.r._write_inventory()          # a restarted board may listen on another port
        return f"{n} boards run the flashed image as OSTree deployment {ostree_board.OSNAME}"

    def step_update(self) -> str:
        from provisioner.contracts.inventory import group_name
        from provisioner.fleet.runner import FleetOptions, run_fleet

        server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_QuietHandler, directory=str(self.repo)))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}"
        try:
            for lane in self.r.lanes:
                release, commit = self.new[lane.manifest.release]
                doc = read_release_json(release)
                ota = doc.ota_entry(release)
                ev = {**SIM_VARS, "edge_llm_update_os_repo_url": url,
                      "edge_llm_update_os_branch": ota.branch, "edge_llm_update_os_commit": commit,
                      "edge_llm_update_os_serial": 1, "edge_llm_update_os_max_fail_percentage": 100,
                      "edge_llm_expected_build_id": doc.release}
                report = run_fleet("update-os", self.r.inventory, self.r.ctx,
                                   FleetOptions(limit=group_name(lane.board.id), extra_vars=ev,
                                                report_path=self.dir / f"update-os-{lane.manifest.release}.json",
                                                log_path=self.dir / f"update-os-{lane.manifest.release}.log"))
                for row in report.rows:
                    uo = (row.details or {}).get("update_os") or {}
                    self.rows[row.board] = {"outcome": uo.get("outcome") or row.verdict, "from": uo.get("from"),
                                            "to": uo.get("to"), "verdict": row.verdict,
                                            "reason": row.reason or "", "bytes_pulled": row.bytes_downloaded}
                    if row.verdict != "pass":
                        self.r.failed_boards.setdefault(row.board, row.reason or row.verdict)
        finally:
            server.shutdown()
            server.server_close()
        updated = sum(1 for r in self.rows.values() if r["outcome"] == "updated")
        return (f"{updated} of {len(self.rows)} boards updated and committed, "
                f"{len(self.rows) - updated} not (see the update-os column)")

    def cleanup(self) -> None:
        """OSTree deployments are immutable (ostree sets chattr +i on them): clear that, so the work
        dir can be removed with a plain ``rm -rf`` once the boards are down."""
        from provisioner.sim import ostree_board
        from provisioner.sim.board import VirtualBoard

        if self.r.o.keep:
            return
        for lane in self.r.lanes:
            for serial in lane.serials:
                unfreeze(ostree_board.sysroot(VirtualBoard.load(self.r.sim_root, serial)))

    # ------------------------------------------------------------------ helpers
    def _rootfs(self, lane: Lane) -> Path:
        from provisioner.sim.board import VirtualBoard

        return VirtualBoard.load(self.r.sim_root, lane.serials[0]).rootfs_dir

    def _release(self, lane: Lane, release_id: str, rootfs: Path, change: dict[str, bytes]) -> tuple[Path, str]:
        """A release folder as a sota ``build`` leaves it (release.json ``ota`` + the tarball); successive
        builds share one ostree_repo like the deploy folder's, so the second commit's parent is the first."""
        from provisioner.image.release import ota_kargs
        from provisioner.ota.commit import collect
        from provisioner.sim.ostree_image import build_commit

        machine = lane.board.kas_machine
        work = self.dir / "build" / lane.manifest.release
        tree = image_tree(rootfs, work / f"image-{release_id}", release_id, change)
        tarball, commit, _ = build_commit(tree, work, work / f"deploy-{release_id}", image=IMAGE, machine=machine)
        rel = self.dir / "releases" / release_id
        shutil.rmtree(rel, ignore_errors=True)
        rel.mkdir(parents=True)
        ota = OtaEntry.from_json({**collect(tarball, rel, machine, env=self.r.ctx.env),  # as the build
                                  "kargs": ota_kargs(lane.manifest)},
                                 rel)
        write_release_json(rel, ReleaseDocument(release=release_id, board=lane.board.id, ota=ota))
        return rel, commit


def image_tree(rootfs: Path, tree: Path, build_id: str, change: dict[str, bytes]) -> Path:
    """The rootfs a sota build would commit: the flashed image's, this BUILD_ID in /etc/os-release, the
    kernel where meta-updater's ostree-kernel puts it (``${nonarch_base_libdir}/modules/<ver>/vmlinuz``,
    recipes-sota/ostree-kernel-initramfs @ f0e1ccaf) and the ``change``d files; no /opt (not committed).

    The boards' rootfs is the *launched* one: what ``fleet launch`` wrote that is the board's own (its API
    token) is left out, as an image never has it (``ota publish`` refuses a commit that does,
    :mod:`provisioner.ota.secrets`); :func:`keep_board_etc` gives it back to the board's deployment.
    """
    from provisioner.ota.secrets import by_name

    shutil.rmtree(tree, ignore_errors=True)
    shutil.copytree(rootfs, tree, symlinks=True, ignore=lambda d, names: ["opt"] if Path(d) == rootfs else [])
    for path in [p for p in tree.rglob("*") if p.is_file() and not p.is_symlink()]:
        if by_name(f"/{path.relative_to(tree)}"):
            path.unlink()
    for path in sorted((p for p in tree.rglob("*") if launched(p.relative_to(tree))), reverse=True):
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    osr = tree / "etc/os-release"
    if osr.is_symlink():
        osr.unlink()
    text = osr.read_text(encoding="utf-8") if osr.is_file() else "ID=qcom-distro\n"
    lines = [ln for ln in text.splitlines() if not ln.startswith("BUILD_ID=")] + [f'BUILD_ID="{build_id}"']
    osr.write_text("\n".join(lines) + "\n", encoding="utf-8")
    kdir = tree / "usr/lib/modules/6.6.0-qli"
    kdir.mkdir(parents=True, exist_ok=True)
    (kdir / "vmlinuz").write_bytes(b"synthetic kernel\n" * 64)
    for rel, data in change.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_bytes(data)
    return tree


def launched(rel: Path) -> bool:
    """What ``fleet launch`` wrote into the board's /etc: its serving instances (units, sockets, drop-ins,
    enablement links) and their configs. That is each board's own (its ports), never an image's: a commit
    built from one launched board would give every board that board's ports."""

    text = rel.as_posix()
    if text.startswith(on_board.SERVE_CONFIG_DIR.lstrip("/") + "/"):
        return True
    unit_dir = on_board.SERVE_UNIT_DIR.lstrip("/") + "/"
    instance = on_board.SERVE_UNIT.split("@")[0] + "@"
    return text.startswith(unit_dir) and any(part.startswith(instance) and not part.startswith(instance + ".")
                                             for part in rel.parts)


def keep_board_etc(rootfs: Path, deploy_dir: Path) -> None:
    """Give each deployment's /etc what the flashed board's /etc holds of its own: owners, and the files
    the image lacks (the API token ``fleet launch`` wrote, mode 0600, owned by the service user).

    The files and links the image lacks include the serving instances launch set up (:func:`launched`).
    On a real board launch writes into the deployment's /etc, and ``ostree admin deploy`` carries it,
    owner included, into the next deployment (the /etc 3-way merge, ostree-admin-deploy(1)). The
    rehearsal's board launched before it became an OSTree board, so this carries it once by hand.
    Without it the service cannot read its token and never comes up, and the gate's serving-API step
    fails on a good board.
    """
    src = rootfs / "etc"
    for dep in sorted(p for p in deploy_dir.iterdir() if p.is_dir()) if deploy_dir.is_dir() else []:
        dst = dep / "etc"
        for path in sorted(src.rglob("*")):
            twin = dst / path.relative_to(src)
            try:
                want = path.lstat()
                if path.is_symlink() and not twin.is_symlink() and not twin.exists():
                    twin.parent.mkdir(parents=True, exist_ok=True)       # an enablement link launch made
                    os.symlink(os.readlink(path), twin)
                elif path.is_file() and not path.is_symlink() and not twin.exists():
                    twin.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(path, twin)
                have = twin.lstat()
            except OSError:
                continue
            if (have.st_uid, have.st_gid) != (want.st_uid, want.st_gid):
                os.lchown(twin, want.st_uid, want.st_gid)


def unfreeze(path: Path) -> None:
    """``chattr -R -i``: what ``ostree admin deploy`` made immutable may be removed again."""
    chattr = shutil.which("chattr")
    if path.exists() and chattr:
        subprocess.run([chattr, "-R", "-i", str(path)], check=False, capture_output=True, env={})   # needs no env
