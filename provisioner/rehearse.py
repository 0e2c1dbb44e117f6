"""The main job end to end on virtual boards: ``provisioner rehearse``.

A newcomer (or a release engineer before touching a rack) sees the whole product work in
minutes: manifest in, verified boards running inference out. Every stage is the production
code path - the same functions ``check``, ``render``, ``build --dry-run``, ``station flash``,
``console`` and ``fleet`` call - and only the boards, their EDL USB side and the NPU runtimes are
simulated (:mod:`provisioner.sim`). This module is one of the three places allowed to import
the simulator (with tests and ``provisioner sim``).

One *lane* per manifest (board type): the built-in rehearsal runs the two reference deployments,
Gemma-4 E2B on IQ-8275 and Nemotron Nano (Genie) on IQ-9075, side by side.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from provisioner import context, rehearse_serve, tools
from provisioner.errors import UserError
from provisioner.manifest import Manifest, load_manifest
from provisioner.rehearse_lanes import (
    Lane,
    RehearsalError,
    RehearsalOptions,
    RehearsalReport,
    assign_faults,
    diagnosis,
    split_boards,
)
from provisioner.steps import Listener, Step, StepRunner

EXAMPLES_DIR = Path(__file__).resolve().parent.parent / "examples"
BUILTIN_EXAMPLES = ("gemma4-e2b-iq8275.yaml", "nemotron-nano-iq9075.yaml")
CONSOLE_PASSWORD_FILE = "console.pw"   # in the sim root, mode 0600
HOST_TOOLS = (("/usr/sbin/sshd", "openssh-server"), ("ssh", "openssh-client"), ("mkfs.ext4", "e2fsprogs"),
              ("debugfs", "e2fsprogs"), ("unshare", "util-linux"),
              ("gcc", "gcc"))      # builds the virtual boards' stand-in NPU libraries (provisioner/sim/clib)
PYTHON_TOOLS = ("ansible-playbook", "ansible-inventory")   # ansible-core, a pip dependency of this tool
MAX_CONSOLES = 32      # boards driven at once over their consoles / HTTP (threads waiting on I/O)


def check_options(manifests: tuple[Path, ...], boards: int, faults: tuple[str, ...]) -> None:
    """Refuse bad options before anything starts (no boards to tear down for a typo)."""
    from provisioner.sim.board import FAULTS

    for m in manifests:
        if not Path(m).is_file():
            raise RehearsalError(f"{m}: no such manifest", "pass a manifest file, or none for the built-in examples")
    for f in faults:
        if f not in FAULTS:
            raise RehearsalError(f"unknown fault '{f}'", f"use one of: {', '.join(FAULTS)}")
    split_boards(boards, len(manifests) or len(BUILTIN_EXAMPLES))
    if len(faults) > boards:
        raise RehearsalError(f"{len(faults)} faults for {boards} boards", "give every fault its own board")


class Rehearsal:
    """The rehearsal as named steps over shared state (the lanes, the sim root, the work dir)."""

    def __init__(self, options: RehearsalOptions, ctx: context.RunContext) -> None:
        check_options(options.manifests, options.boards, options.faults)
        self.o = options
        self.ctx = ctx
        self.r = ctx.reporter
        self.work = Path(options.work_dir or ctx.work_dir / "rehearsal").resolve()
        self.sim_root = Path(options.sim_root or self.work / "sim").resolve()
        self.lanes: list[Lane] = []
        self.inventory = self.work / "inventory.yml"
        self.station_db = self.work / "station.db"
        self.fleet_reports: dict[str, Any] = {}
        self.failed_boards: dict[str, str] = {}
        self.completions: dict[str, dict[str, Any]] = {}
        self.eval_scores: dict[str, dict[str, Any]] = {}
        self.boards_info: dict[str, dict[str, Any]] = {}
        self._cred: Any = None
        self.ota: Any = None
        if options.ota:
            from provisioner.rehearse_ota import OtaRehearsal

            self.ota = OtaRehearsal(self)

    # ------------------------------------------------------------------ plan of the run
    def steps(self) -> list[Step]:
        sim = "virtual EVKs (provisioner.sim)"
        return [
            Step("host", self.step_host, what="prerequisites: root, sshd, e2fsprogs, util-linux, ansible-playbook"),
            Step("check", self.step_check, what="manifest validation + model inspection (real .litertlm/Genie files)"),
            Step("render", self.step_render, what="kas config + meta-edge-llm layer, validated with kas's schema"),
            Step("build command", self.step_build_command, what="kas-container command (dry run; no 250 GB build)"),
            Step("release", self.step_release, simulated=True,
                 what="release directory around a synthetic qcomflash bundle (real XML, ext4 rootfs)"),
            Step("boards up", self.step_boards_up, cleanup=self.cleanup_boards, simulated=True,
                 what=f"{sim}: mount namespaces with sshd -i per connection, pty consoles, fake USB"),
            Step("enter EDL", self.step_enter_edl, simulated=True,
                 what="station console driver (pyserial) runs `reboot edl` on each board"),
            Step("flash", self.step_flash, simulated=True,
                 what="station preflight + parallel flashing with the qdl stand-in, records in SQLite"),
            Step("boot check", self.step_boot_check, simulated=True,
                 what="what the station read on each console after flashing (recorded attempt): BUILD_ID, "
                      "soc0 machine where root may log in"),
            Step("fleet verify", self.step_verify, simulated=True,
                 what="ansible-playbook verify.yml over real SSH; NPU runtime simulated"),
            Step("fleet launch", self.step_launch, simulated=True,
                 what="ansible-playbook launch.yml: edge-llm-serve@<model> per board"),
            Step("completion", partial(rehearse_serve.step_completion, self), simulated=True,
                 what="one HTTP POST /v1/completions per board through its service"),
            Step("fleet eval", partial(rehearse_serve.step_eval, self), simulated=True,
                 what="ansible-playbook eval.yml: the default suite through each board's own API"),
            *(self.ota.steps() if self.ota else []),
        ]

    def run(self, on_event: Listener | None = None) -> RehearsalReport:
        self.work.mkdir(parents=True, exist_ok=True)
        lock = self._lock_work_dir()
        try:
            return self._run(on_event)
        finally:
            lock.close()

    def _lock_work_dir(self):  # noqa: ANN202 - an open file whose flock lasts as long as it is open
        """Two rehearsals in one work dir would share its sim root, inventory and records and see each
        other's boards: refuse the second one, like the station's records lock does."""
        f = (self.work / ".rehearsal.lock").open("a+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "?"
            f.close()
            raise UserError(f"work dir {self.work} is in use by another rehearsal (pid {holder})",
                            "wait for it to finish, or give this one its own --work-dir") from None
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
        return f

    def _run(self, on_event: Listener | None) -> RehearsalReport:
        runner = StepRunner(on_event=on_event)
        results = runner.run(self.steps())
        ok = runner.ok and len(results) == len(self.steps()) and not self.failed_boards
        report = RehearsalReport(steps=results, lanes=[self._lane_dict(ln) for ln in self.lanes],
                                 boards=self._board_rows(), ok=ok, work_dir=str(self.work), kept=self.o.keep)
        (self.work / "rehearsal.json").write_text(json.dumps(report.as_dict(), indent=2, default=str) + "\n",
                                                  encoding="utf-8")
        return report

    # ------------------------------------------------------------------ steps
    def step_host(self) -> str:
        """Virtual boards need root (mount namespaces) and a few Debian/Ubuntu packages."""
        missing = [pkg for prog, pkg in HOST_TOOLS if not shutil.which(prog) and not Path(prog).exists()]
        if os.geteuid() != 0:
            raise RehearsalError("virtual boards need root (mount namespaces, sshd per board)",
                                 "run `sudo provisioner rehearse` (or as root in a container/VM)")
        if missing:
            pkgs = " ".join(sorted(set(missing)))
            raise RehearsalError(f"missing host packages for virtual boards: {pkgs}",
                                 f"apt-get install -y {pkgs}")
        for prog in PYTHON_TOOLS:
            tools.require(prog, error=RehearsalError)
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)
        return "root, sshd, e2fsprogs, unshare, ansible-playbook present"

    def step_check(self) -> str:
        from provisioner.check import run_check

        sources = list(self.o.manifests) or [EXAMPLES_DIR / name for name in BUILTIN_EXAMPLES]
        counts = split_boards(self.o.boards, len(sources))
        for src, count in zip(sources, counts, strict=True):
            manifest, synthetic = self._rehearsal_manifest(Path(src))
            self.lanes.append(Lane(source=Path(src), manifest=manifest, count=count, synthetic_models=synthetic,
                                   model_files={m.name: m.path for m in manifest.models if m.path}))
        assign_faults(self.o.faults, self.lanes)
        lines = []
        for lane in self.lanes:
            res = run_check(lane.manifest)
            if res.problems:
                raise RehearsalError(f"{lane.source.name}: " + "; ".join(str(p) for p in res.problems))
            builds = sorted({b for mc in res.models if mc.inspection for b in mc.inspection.qairt_builds})
            lines.append(f"{lane.manifest.release}: {lane.board.id}, QAIRT {', '.join(builds) or '?'} read from "
                         f"the model{'s' if len(res.models) > 1 else ''}")
        return "; ".join(lines)

    def _rehearsal_manifest(self, src: Path) -> tuple[Manifest, list[str]]:
        """The manifest as given, with model files made where only a URL is known (their names returned).

        Models with a local file are used as they are; downloadable ones are replaced by small
        real-format stand-ins (same name, QAIRT and target SoC), and the rehearsal's controller key
        is added to the image's authorized keys, as an ops team's key would be.
        """
        from provisioner.sim import synthetic_models
        from provisioner.sim.sshd import controller_key

        original = load_manifest(src)  # validate the user's file first, with its own locations
        data = yaml.safe_load(src.read_text(encoding="utf-8"))
        lane_dir = self.work / "lanes" / original.release
        lane_dir.mkdir(parents=True, exist_ok=True)
        board = original.board
        synthetic: list[str] = []
        for raw, model in zip(data["models"], original.models, strict=True):
            if model.path is not None and model.path.exists():
                raw["path"] = str(model.path)
                continue
            if model.kind == "litertlm":
                target = lane_dir / model.filename
                if not target.exists():
                    synthetic_models.make_litertlm(target, model.qairt)
            else:
                target = lane_dir / f"{model.name}-genie-{board.soc.lower()}"
                if not target.exists():
                    tmp = lane_dir / f".{target.name}.tmp"
                    shutil.rmtree(tmp, ignore_errors=True)
                    synthetic_models.make_genie_bundle(tmp, soc_model=board.qnn_soc_model,
                                                       dsp_arch=board.hexagon_arch,
                                                       qairt_full=f"{model.qairt}000000")
                    os.replace(tmp, target)
            raw.pop("url", None)
            raw.pop("sha256", None)
            raw.pop("size", None)
            raw["path"] = str(target)
            synthetic.append(model.name)
        image = data.setdefault("image", {}) or {}
        pub = Path(str(controller_key(self.sim_root)) + ".pub").read_text(encoding="utf-8").strip()
        keys = [k for k in image.get("ssh_authorized_keys", []) or [] if "Example" not in k]
        image["ssh_authorized_keys"] = keys + [pub]
        if image.get("root_login") == "disabled":
            image["root_login"] = "keys-only"
        data["image"] = image
        build = data.setdefault("build", {}) or {}
        for key in ("work_dir", "build_dir", "dl_dir", "sstate_dir", "repo_ref_dir", "ssh_dir"):
            build.pop(key, None)
        build.update({"work_dir": str(self.work / "kas-work"), "dl_dir": str(self.work / "downloads"),
                      "sstate_dir": str(self.work / "sstate")})
        data["build"] = build
        out = lane_dir / "manifest.yaml"
        out.write_text("# rehearsal copy of " + str(src) + "\n" + yaml.safe_dump(data, sort_keys=False),
                       encoding="utf-8")
        return load_manifest(out), synthetic

    def step_render(self) -> str:
        from provisioner.image.render import render

        out = []
        for lane in self.lanes:
            result = render(lane.manifest, self.work / "render" / lane.manifest.release)
            validate_kas_schema(result.kas_files)
            out.append(f"{lane.board.kas_machine}: {result.kas_file.name} + {len(result.layer_files)} layer files")
        return "; ".join(out)

    def step_build_command(self) -> str:
        from provisioner.image.build import build

        for lane in self.lanes:
            ctx = context.RunContext({"KAS_CONTAINER_ENGINE": "docker", **self.ctx.env}, self.ctx.work_dir)
            setup = build(lane.manifest.path, self.work / "releases", ctx, dry_run=True,
                          host_config={"engine": "docker"})
            lane.build_command = setup.command_line()
        return f"{len(self.lanes)} kas-container command(s) planned (see rehearsal.json)"

    def step_release(self) -> str:
        from provisioner.image.release import write_release
        from provisioner.sim.bundle import make_bundle

        out = []
        for lane in self.lanes:
            kas_dir = self.work / "render" / lane.manifest.release
            kas_files = sorted(kas_dir.glob("*.yml"))
            # the virtual image's /etc/os-release follows these files, as a real build's would
            bundle = make_bundle(lane.manifest, self.work / "bundles" / lane.manifest.release,
                                 model_files=lane.model_files, kas_files=kas_files)
            lane.release_dir = write_release(lane.manifest, bundle, self.work / "releases",
                                             kas_files=kas_files, simulated=True,
                                             build_info={"host": "rehearsal", "duration_s": 0, "sstate": None})
            out.append(f"{lane.release_dir.name}")
        return "release dirs: " + ", ".join(out)

    def step_boards_up(self) -> str:
        from provisioner.sim import control

        for lane in self.lanes:
            healthy = lane.count - len(lane.faults)
            groups: list[tuple[int, tuple[str, ...]]] = [(1, (f,)) for f in lane.faults]
            if healthy > 0:
                groups.insert(0, (healthy, ()))
            elif healthy < 0:
                raise RehearsalError(f"{len(lane.faults)} faults for {lane.count} {lane.board.id} board(s)",
                                     "raise --boards so every fault gets its own board")
            for count, faults in groups:
                res = control.up(count, lane.board.id, root=self.sim_root, faults=faults, state="booted")
                for vb in res.boards:
                    lane.serials.append(vb.serial)
                    self.boards_info[vb.serial] = {"serial": vb.serial, "board": lane.board.id,
                                                   "slot": vb.slot, "faults": list(faults),
                                                   "release": lane.manifest.release}
        total = sum(len(ln.serials) for ln in self.lanes)
        return f"{total} boards booted with a factory image, consoles on ptys"

    def cleanup_boards(self) -> None:
        from provisioner.sim import control

        if self.o.keep:
            self.r.info(f"boards kept: `provisioner sim status --root {self.sim_root}`; "
                        f"`provisioner sim down --root {self.sim_root}` when done")
            return
        control.down(self.sim_root)

    def _credential(self):
        """The boards' console password, handed to the station as a real station gets it from a file.

        A file of mode 0600 in the rehearsal's own folder, not our environment: every child
        (ansible-playbook, ssh, the virtual boards) would inherit an environment variable.
        """
        from provisioner.sim.board import VirtualBoard
        from provisioner.station.config import Credential

        if self._cred is None:
            serial = self.lanes[0].serials[0]
            path = self.sim_root / CONSOLE_PASSWORD_FILE
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                os.fchmod(f.fileno(), 0o600)   # an older file keeps its mode through O_TRUNC
                f.write(VirtualBoard.load(self.sim_root, serial).data["root_password"] + "\n")
            self._cred = Credential(env=None, file=path)
        return self._cred

    def _console(self, serial: str) -> str:
        from provisioner.sim.board import VirtualBoard

        return str(VirtualBoard.load(self.sim_root, serial).console_link)

    def step_enter_edl(self) -> str:
        from provisioner.station import edl
        from provisioner.station.console import ConsoleDriver

        cred = self._credential()
        serials = [s for ln in self.lanes for s in ln.serials]

        def to_edl(serial: str) -> str | None:
            try:
                with ConsoleDriver(self._console(serial), env=self.ctx.env, credential=cred) as con:
                    con.reboot_edl()
            except UserError as exc:
                return f"{serial}: {exc.message}"
            return None

        # every board on its own console at once, as a factory operator's script does (a login
        # and `reboot edl` is seconds of waiting on each UART, nothing the station host computes)
        with ThreadPoolExecutor(max_workers=min(MAX_CONSOLES, len(serials)), thread_name_prefix="edl") as pool:
            failed = [e for e in pool.map(to_edl, serials) if e]
        if failed:
            raise RehearsalError("`reboot edl` failed on the console of " + "; ".join(failed),
                                 "check their consoles (`provisioner console`)")
        deadline = time.monotonic() + 60
        seen: set[str] = set()
        while time.monotonic() < deadline:
            seen = {d.serial for d in edl.scan_edl(self.sim_root / "sysfs") if d.mode == "edl"}
            if set(serials) <= seen:
                return f"{len(serials)} boards in EDL (05c6:9008), found in sysfs"
            time.sleep(0.2)
        missing = sorted(set(serials) - seen)
        raise RehearsalError(f"boards {', '.join(missing)} did not appear in EDL after `reboot edl`",
                             "check their consoles (`provisioner console`)")

    def _station_config(self):
        from provisioner.station.config import StationConfig

        return StationConfig(sysfs_root=self.sim_root / "sysfs", qdl=str(self.sim_root / "bin" / "qdl"),
                             consoles={s: self._console(s) for ln in self.lanes for s in ln.serials},
                             database=self.station_db, log_dir=self.work / "station-logs",
                             credential=self._credential())

    def step_flash(self) -> str:
        from provisioner.station.flash import FlashOptions, flash_release
        from provisioner.station.records import Records

        config = self._station_config()
        records = Records(self.station_db)
        stop = threading.Event()

        def flash_lane(lane: Lane) -> list[str]:
            assert lane.release_dir is not None
            options = FlashOptions(serials=tuple(lane.serials), board_id=lane.board.id, boot_check=True,
                                   timeout_s=300)
            run = flash_release(lane.release_dir, config, self.ctx, options, records=records, stop=stop)
            return [f"{b.serial}: {b.error}" for b in run.failed]

        # One station, one records database, every lane's release at once: each board has its own
        # USB link and qdl process, so a second board type need not wait for the first one's boot.
        failed: list[str] = []
        try:
            with ThreadPoolExecutor(max_workers=len(self.lanes), thread_name_prefix="lane") as pool:
                futures = [pool.submit(flash_lane, lane) for lane in self.lanes]
                try:
                    for fut in futures:
                        failed += fut.result()
                except BaseException:
                    stop.set()          # Ctrl-C or a failed lane: the other lanes' qdl runs end too
                    raise
        finally:
            records.close()
        if failed:
            raise RehearsalError("flashing failed on " + "; ".join(failed), f"see {self.work / 'station-logs'}")
        total = sum(len(ln.serials) for ln in self.lanes)
        return f"{total} boards flashed in parallel and booted; attempts in {self.station_db.name}"

    def step_boot_check(self) -> str:
        """Each board's recorded attempt: the identity the station read on its console after the
        reboot (full identity on debug images, the banner's BUILD_ID on production images)."""
        from provisioner.station.console import BANNER_SOURCE
        from provisioner.station.records import Records

        wrong, banner, keys = [], 0, 0
        with Records(self.station_db, writer=False) as rec:
            for lane in self.lanes:
                for serial in lane.serials:
                    last = (rec.history(serial) or [{}])[0]
                    ident = last.get("identity") or {}
                    build_id = ident.get("build_id")
                    self.boards_info[serial]["build_id"] = build_id
                    by_banner = ident.get("source") == BANNER_SOURCE
                    banner += by_banner
                    keys += bool(ident.get("host_keys")) and ident.get("serial") == serial
                    machine_ok = by_banner or ident.get("machine") == lane.board.soc0_machine
                    if last.get("result") != "passed" or build_id != lane.manifest.release or not machine_ok:
                        wrong.append(f"{serial}: {last.get('result')}, machine {ident.get('machine')}, "
                                     f"BUILD_ID {build_id}")
        if wrong:
            raise RehearsalError("boards did not come up with the flashed release: " + "; ".join(wrong),
                                 "look at the board's console log and the qdl log")
        how = f" ({banner} from the getty banner: root login is disabled on production images)" if banner else ""
        return (f"every board showed the flashed BUILD_ID on its console{how}, {keys} with its serial and the SSH "
                "host key it made at first boot (the fleet connects pinned to them)")

    def _write_inventory(self) -> Path:
        """The virtual fleet's inventory: per board type, the release it was flashed with (read from release.json)."""
        from provisioner.contracts import inventory
        from provisioner.contracts.release import load_release
        from provisioner.sim import control

        path = control.write_inventory(self.sim_root, self.inventory)
        inv = yaml.safe_load(path.read_text(encoding="utf-8"))
        self._pin_host_keys(inv)
        for lane in self.lanes:
            group = inv["all"]["children"].get(inventory.group_name(lane.board.id))
            if not group or lane.release_dir is None:
                continue
            with load_release(lane.release_dir, hash_files=False) as release:
                group["vars"] = inventory.group_vars(
                    expected_build_id=release.id, models=inventory.models_from_release(release.models),
                    download_mode=lane.manifest.image.download_mode)
        inventory.write_inventory(path, inv)
        return path

    def _pin_host_keys(self, inv: dict[str, Any]) -> None:
        """Reach each board as a fleet would after the factory: pinned to the host keys the station read on
        its console (`station export-inventory`'s known_hosts), not to the simulator's own known_hosts."""
        from provisioner.station.inventory_export import pin_inventory
        from provisioner.station.records import Records

        if self.station_db.is_file():
            with Records(self.station_db, writer=False) as rec:
                pin_inventory(inv, rec, self.work / "fleet")

    def step_verify(self) -> str:
        from provisioner.fleet.runner import FleetOptions, run_fleet

        inv = self._write_inventory()
        report = run_fleet("verify", inv, self.ctx,
                           FleetOptions(report_path=self.work / "verify.json", log_path=self.work / "verify.log"))
        self.fleet_reports["verify"] = report
        for row in report.rows:
            if row.verdict != "pass":
                self.failed_boards[row.board] = row.reason or row.verdict
        passed = [r.board for r in report.rows if r.verdict == "pass"]
        if not passed:
            raise RehearsalError("no board passed verification", "see the report below and verify.log")
        return f"{len(passed)} passed, {len(report.rows) - len(passed)} failed (see the fleet report)"

    def _healthy_hosts(self) -> list[str]:
        report = self.fleet_reports["verify"]
        return [r.board for r in report.rows if r.verdict == "pass"]

    def step_launch(self) -> str:
        from provisioner.fleet.runner import FleetOptions, run_fleet

        healthy = self._healthy_hosts()
        report = run_fleet("launch", self.inventory, self.ctx,
                           FleetOptions(limit=",".join(healthy), report_path=self.work / "launch.json",
                                        log_path=self.work / "launch.log"))
        self.fleet_reports["launch"] = report
        bad = [f"{r.board}: {r.reason}" for r in report.rows if r.verdict != "pass"]
        if bad:
            raise RehearsalError("service did not become healthy on " + "; ".join(bad),
                                 f"see {self.work / 'launch.log'}")
        return f"edge-llm-serve healthy on {len(report.rows)} boards"

    def _inventory_hosts(self) -> dict[str, dict[str, Any]]:
        if not self.inventory.is_file():
            return {}
        inv = yaml.safe_load(self.inventory.read_text(encoding="utf-8"))
        return {name: hv for g in inv["all"]["children"].values() for name, hv in g["hosts"].items()}

    # ------------------------------------------------------------------ report
    def _lane_dict(self, lane: Lane) -> dict[str, Any]:
        return {"manifest": str(lane.source), "release": lane.manifest.release, "board": lane.board.id,
                "qairt": list(lane.manifest.qairt), "runtimes": list(lane.manifest.runtimes),
                "boards": lane.serials, "faults": lane.faults, "synthetic_models": lane.synthetic_models,
                "release_dir": str(lane.release_dir) if lane.release_dir else None,
                "build_command": lane.build_command}

    def _board_rows(self) -> list[dict[str, Any]]:
        rows = []
        verify = self.fleet_reports.get("verify")
        by_serial = {}
        if verify is not None:
            # the inventory contract's key (provisioner.contracts.inventory: edge_llm_serial)
            serial_of = {name: str(hv.get("edge_llm_serial") or name) for name, hv in self._inventory_hosts().items()}
            for r in verify.rows:
                by_serial[serial_of.get(r.board, r.board).upper()] = r
        for serial, info in self.boards_info.items():
            row = dict(info)
            vr = by_serial.get(serial.upper())
            if vr is not None:
                row.update({"host": vr.board, "verdict": vr.verdict, "reason": diagnosis(vr),
                            "decode_tok_s": vr.decode_tok_s, "min_decode_tok_s": vr.expected_decode_tok_s,
                            "ttft_s": vr.ttft_s, "qairt": vr.qairt})
                comp = self.completions.get(vr.board)
                if comp:
                    row["completion"] = comp["choices"][0].get("text", "")[:80]
                if vr.board in self.eval_scores:
                    row["eval"] = self.eval_scores[vr.board]
                if self.ota and vr.board in self.ota.rows:
                    row["update_os"] = self.ota.rows[vr.board]
            rows.append(row)
        return rows


def validate_kas_schema(files: list[Path]) -> None:
    """Validate rendered kas files with kas's own JSON schema (no repos or network needed)."""
    import jsonschema
    from kas.configschema import CONFIGSCHEMA

    for f in files:
        data = yaml.safe_load(Path(f).read_text(encoding="utf-8"))
        try:
            jsonschema.validate(data, CONFIGSCHEMA)
        except jsonschema.ValidationError as exc:
            where = "/".join(str(p) for p in exc.absolute_path) or "(top level)"
            raise RehearsalError(f"{Path(f).name}: kas schema: {where}: {exc.message}",
                                 "this is a template bug; report it") from None
