"""Hostile matrix: the critical and high items of issue 21, each attack run against the real tool.

One row per attack. Each row drives what a user runs (the ``provisioner`` CLI in a subprocess, which runs
the real ``ansible-playbook``; the real edge-llm-serve script) and reports what the attacker tried, what
happened, with the figures measured, and whether the defence holds. The last line says how many hold.

Item 1, a release or artifact file runs commands as root on the controller. The attacker's value is
``{{ lookup('pipe', 'id > FILE; echo <64 hex>') }}``: "held" means FILE never appears.
  - release.json: the template in each string field, ``fleet update-os`` with and without ``--check``
    (the board is a closed port, so all of it happens on the controller).
  - model.json in an artifact tree: the template in each field, ``fleet deploy`` with and without ``--check``.
  - artifact index .json: the template in each string, ``fleet deploy`` with and without ``--check``.
  - board replies: templates in every value of a virtual board's os-release, release.json, model.json and
    service configs, then ``fleet verify``, ``benchmark`` and ``launch`` over real SSH.
  - release.json on a live OSTree board: the template in each field, ``fleet update-os --check`` (every
    task runs, not only the first), with the untouched release as the control.
Item 2, an ostreecommit tarball writes outside its folder.
  - members named ``../../../escaped``, ``objects/../../../../escaped`` and an absolute path, through
    ``ota publish``, on this interpreter and on Debian 12's /usr/bin/python3 (3.11.2, no tarfile data
    filter; run from a throw-away venv that sees this interpreter's packages).
  - a ~300 KB xz tarball whose one member is 1.9 GiB of zeros, through ``ota publish`` on both: the most
    bytes found under the run's TMPDIR while it runs, and the limit the tool names.
Item 3, a release for another board is installed (live OSTree IQ-8275 board, repository served on HTTP).
  - the IQ-9075 release: the verdict, requests the repository saw, the commit the board boots.
  - an IQ-8275 release whose OSTree branch is IQ-9075's: the same figures.
Item 4, a local user squats the service port: with the unit stopped, a process of uid 65534 binds the
  port, then ``fleet launch`` and ``fleet benchmark`` run. Either the bind fails (the port stays held, e.g.
  by a socket unit) and both pass on the real service, or the impostor listens and then both must fail and
  no request may reach it with an Authorization header, and ``fleet launch`` passes once it is gone.
Item 5, unauthenticated requests grow the service's memory (real edge-llm-serve, the simulator's
  stand-in LiteRT-LM library).
  - 8,000 unauthenticated requests (401 and 404) with 16,000-byte paths: RSS before and after, the peak
    RSS during one /metrics read, its size and how many endpoint labels it holds.
  - request heads of 16,385 to 60,000 bytes sent in one write (over the 16 KiB limit).
  - a reply larger than two socket buffers, read through a 64 KiB receive window.

The virtual-board rows need root and sshd (boards are mount namespaces with sshd -i per connection), the
OSTree rows also the ostree CLI; elsewhere they print "skipped: <why>". Not a test: nothing is timed
against a goal, every figure is printed. Usage: python3 bench/hostile.py
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout's provisioner and tests/ before an installed copy

import io  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import site  # noqa: E402
import subprocess  # noqa: E402
import tarfile  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

from bench import hostile_serve as svc  # noqa: E402  (item 5: the service's rows)
from bench.hostile_serve import Result, counts, size  # noqa: E402
from provisioner import context  # noqa: E402
from provisioner.hashing import sha256_file  # noqa: E402
from provisioner.ota import TARBALL_PATH  # noqa: E402
from provisioner.ota.commit import collect  # noqa: E402
from provisioner.sim import host  # noqa: E402
from provisioner.sim.ostree_image import build_commit  # noqa: E402
from tests.fleet.artserver import ArtifactServer  # noqa: E402
from tests.fleet.simfleet import BoardSpec, build_fleet, can_run, free_port  # noqa: E402
from tests.fleet.test_fleet_launch import IMPOSTOR  # noqa: E402
from tests.fleet.test_untrusted_board import poison_json  # noqa: E402
from tests.fleet.test_untrusted_inputs import (  # noqa: E402
    COMMIT,
    SHA,
    artifact_tree,
    inventory,
    planted,
    release_json,
    string_paths,
)
from tests.ota import otafleet as of  # noqa: E402
from tests.ota.test_commit import _tarball, _Zeros  # noqa: E402

DEBIAN_PYTHON = "/usr/bin/python3"
SERVE_UNIT = "edge-llm-serve@gemma-4-e2b.service"
BOMB_BYTES = 19 * (1 << 30) // 10       # 1.9 GiB of zeros: about 300 KB of xz


class Skipped(Exception):
    """A row that cannot run here; its text says why."""


def cli(*args: object, python: str = sys.executable, env: dict[str, str] | None = None,
        timeout: float = 900) -> tuple[int, str]:
    """``provisioner ARGS`` as a user runs it: exit code and stdout + stderr."""
    p = subprocess.run([python, "-m", "provisioner", *map(str, args)], capture_output=True, text=True,
                       timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200", **(env or {})})
    return p.returncode, p.stdout + p.stderr


def boards(report: Path) -> dict[str, dict[str, Any]]:
    """board -> its row in a fleet report (empty when the run wrote none)."""
    return {b["board"]: b for b in json.loads(report.read_text())["boards"]} if report.is_file() else {}


def reason(row: dict[str, Any], width: int = 150) -> str:
    """A report row's reason without the "role : task: " it starts with."""
    return re.sub(r"^\w+ : [^:]+: ", "", row.get("reason") or "")[:width]


def error_line(out: str) -> str:
    return next((ln.strip() for ln in out.splitlines() if ln.startswith("error:")), out.strip()[-120:])


def template(marker: Path) -> str:
    """The attacker's value: runs ``id`` into ``marker`` if ever templated, and still reads as a commit id."""
    return "{{ lookup('pipe', 'id > " + str(marker) + "; echo " + COMMIT + "') }}"


def dotted(path: tuple) -> str:
    return ".".join(map(str, path))


# -- the controller: templates in release.json, model.json, an artifact index -------------------------------

def release_templates(work: Path) -> Result:
    marker, inv = work / "pwned", inventory(work)
    paths = string_paths(release_json())
    refused, reached, codes, verdicts = set(), set(), Counter(), Counter()
    for path in paths:
        for check in (["--check"], []):
            rel = work / f"rel-{dotted(path)}{'-check' if check else ''}"
            rel.mkdir()
            (rel / "release.json").write_text(json.dumps(planted(release_json(), path, template(marker))))
            code, out = cli("fleet", "update-os", *check, "-i", inv, "--release", rel, "--repo",
                            "http://127.0.0.1:1/repo", "--report", rel / "report.json")
            codes[code] += 1
            verdicts.update(b["verdict"] for b in boards(rel / "report.json").values())
            (refused if "release.json" in out else reached).add(dotted(path))
    ran = marker.exists()
    return (f"{template(marker)} in each of {len(paths)} string fields, update-os with and without --check",
            f"{2 * len(paths)} runs, exit {counts(codes)}; refused naming release.json: {', '.join(sorted(refused))}; "
            f"reached Ansible: {', '.join(sorted(reached - refused)) or 'none'} (board verdicts {counts(verdicts)}); "
            f"id ran: {'YES' if ran else 'never'}", not ran and "pass" not in verdicts)


MODEL_META = {"reference": "gemma-4-e2b", "kind": "litertlm", "runtime": "litert_lm", "qairt": "2.44.0.260225"}


def model_json_templates(work: Path) -> Result:
    marker, inv = work / "pwned", inventory(work)
    codes, named = Counter(), 0
    for key in MODEL_META:
        root = artifact_tree(work / f"art-{key}", {**MODEL_META, key: template(marker)})
        for check in (["--check"], []):
            code, out = cli("fleet", "deploy", *check, "-i", inv, "--artifacts", root, "--artifact-url",
                            "http://127.0.0.1:1")
            codes[code] += 1
            named += f"'{key}' is not a valid value" in out
    ran = marker.exists()
    return (f"the template in each model.json field ({', '.join(MODEL_META)}), deploy with and without --check",
            f"{2 * len(MODEL_META)} runs, exit {counts(codes)}; refused naming the field: {named}; "
            f"id ran: {'YES' if ran else 'never'}", not ran and 0 not in codes)


INDEX = {"base_url": "http://10.0.0.2:8000", "qairt": [], "runtimes": [], "models": [
    {"name": "gemma-4-e2b", "version": "v1", "kind": "litertlm", "runtime": "litert_lm", "qairt": "2.44.0.260225",
     "size": 72, "file": "model.litertlm", "sha256": SHA,
     "files": [{"name": "model.litertlm", "url": "http://10.0.0.2:8000/models/gemma-4-e2b/v1/model.litertlm",
                "sha256": SHA, "size": 72}]}]}


def index_templates(work: Path) -> Result:
    marker, inv = work / "pwned", inventory(work)
    paths = string_paths(INDEX)
    codes, named = Counter(), 0
    for path in paths:
        index = work / f"index-{dotted(path)}.json"
        index.write_text(json.dumps(planted(INDEX, path, template(marker))))
        for check in (["--check"], []):
            code, out = cli("fleet", "deploy", *check, "-i", inv, "--artifacts", index)
            codes[code] += 1
            named += "artifact index" in out
    ran = marker.exists()
    return (f"the template in each of the index's {len(paths)} strings, deploy with and without --check",
            f"{2 * len(paths)} runs, exit {counts(codes)}; refused naming the artifact index: {named}; "
            f"id ran: {'YES' if ran else 'never'}", not ran and 0 not in codes and 70 not in codes)


# -- ostreecommit tarballs through `ota publish` ------------------------------------------------------------

def interpreters(work: Path) -> list[tuple[str, str]]:
    """(label, python): this one, and Debian's own through a venv that sees this one's packages."""
    here = f"python {sys.version.split()[0]}"
    out = [(here, sys.executable)]
    if not os.access(DEBIAN_PYTHON, os.X_OK):
        return out
    venv = work / "debian-venv"
    if not venv.is_dir():
        subprocess.run([DEBIAN_PYTHON, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
        purelib = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig."
                                  "get_paths()['purelib'])"], capture_output=True, text=True, check=True).stdout
        Path(purelib.strip(), "deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    probe = subprocess.run([str(venv / "bin" / "python"), "-c", "import sys, tarfile; print(sys.version.split()[0],"
                            " hasattr(tarfile, 'data_filter'))"], capture_output=True, text=True, check=True)
    version, has_filter = probe.stdout.split()
    return [*out, (f"{DEBIAN_PYTHON} {version}" + (" (no data filter)" if has_filter == "False" else ""),
                   str(venv / "bin" / "python"))]


def ota_release(rel: Path, tarball: Path) -> Path:
    """A release folder whose release.json is valid and whose ostreecommit tarball is ``tarball``."""
    dest = rel / TARBALL_PATH
    dest.parent.mkdir(parents=True)
    tarball.rename(dest)
    ota = {"kind": "ostree", "tarball": TARBALL_PATH, "sha256": sha256_file(dest), "size": dest.stat().st_size,
           "branch": "iq-8275-evk", "commit": COMMIT, "version": "1.0", "subject": "Commit-id: x", "content_size": 1}
    (rel / "release.json").write_text(json.dumps({"format": 1, "release": rel.name, "board": "iq-8275-evk",
                                                  "ota": ota}))
    return rel


def escaping_names(work: Path) -> Result:
    names = ["../../../escaped", "objects/../../../../escaped", str(work / "escaped-absolute")]
    said, codes, repos, n = [], Counter(), 0, 0
    for label, python in interpreters(work):
        results = []
        for name in names:
            n += 1
            rel = ota_release(work / f"hostile-{n}", _tarball(work / "t.tar.xz", name))
            tmp = work / f"run-{n}" / "a" / "b" / "tmp"      # the extractor's folder: three levels below run-N
            tmp.mkdir(parents=True)
            code, out = cli("ota", "publish", rel, "--repo", work / f"repo-{n}", python=python,
                            env={"TMPDIR": str(tmp)})
            codes[code] += 1
            repos += (work / f"repo-{n}").exists()
            results.append("refused" if "unsafe member path" in out else f"exit {code}: {error_line(out)[:60]}")
        said.append(f"{label}: {', '.join(results)}")
    written = sorted(str(p.relative_to(work)) for p in work.rglob("escaped*"))
    return (f"ota publish with members named {', '.join(names)}",
            f"{'; '.join(said)}; exit {counts(codes)}; files written outside the folder: "
            f"{', '.join(written) or 'none'}; repositories created: {repos}",
            not written and repos == 0 and all(c not in (0, 70) for c in codes))


def tree_bytes(path: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return total


def peak_while(path: Path, run: Callable[[], tuple[int, str]]) -> tuple[int, str, int, float]:
    """Run ``run`` while sampling the bytes under ``path`` every 20 ms: (exit, output, peak bytes, seconds)."""
    peak, stop = [0], threading.Event()

    def sample() -> None:
        while not stop.wait(0.02):
            peak[0] = max(peak[0], tree_bytes(path))

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    t0 = time.monotonic()
    try:
        code, out = run()
    finally:
        stop.set()
        t.join()
    return code, out, max(peak[0], tree_bytes(path)), time.monotonic() - t0


def tarball_bomb(work: Path) -> Result:
    bomb = work / "bomb.tar.xz"
    with tarfile.open(bomb, "w:xz", preset=0) as tf:
        info = tarfile.TarInfo("./objects/00/zeros.filez")
        info.size = BOMB_BYTES
        tf.addfile(info, io.BufferedReader(_Zeros(BOMB_BYTES), 1 << 20))
    rel = ota_release(work / "bomb-1", bomb)
    said, ok = [], True
    for i, (label, python) in enumerate(interpreters(work)):
        tmp = work / f"tmp-{i}"
        tmp.mkdir()
        code, out, peak, secs = peak_while(tmp, lambda python=python, tmp=tmp, i=i: cli(
            "ota", "publish", rel, "--repo", work / f"repo-{i}", python=python, env={"TMPDIR": str(tmp)}))
        limit = re.search(r"unpacks to more than (\d+) MiB", out)
        said.append(f"{label}: exit {code} in {secs:.1f} s, "
                    + (f"refused (limit {limit.group(1)} MiB)" if limit else error_line(out)[:80])
                    + f", peak under TMPDIR {size(peak)}")
        ok = ok and limit is not None and peak <= int(limit.group(1)) << 20
    return (f"ota publish of a {size(rel.joinpath(TARBALL_PATH).stat().st_size)} xz tarball whose member is "
            f"{size(BOMB_BYTES)} of zeros",
            "; ".join(said), ok)


CONTROLLER_ROWS: list[tuple[str, Callable[[Path], Result]]] = [
    ("release.json templates (update-os)", release_templates),
    ("model.json templates (deploy)", model_json_templates),
    ("artifact index templates (deploy)", index_templates),
    ("ostreecommit names outside the folder", escaping_names),
    ("ostreecommit tarball bomb", tarball_bomb),
    ("metric label bomb", svc.metric_bomb),
    ("oversized head in one read", svc.oversized_heads),
    ("reply larger than the socket buffers", svc.large_reply),
]


# -- virtual boards: board replies, update-os on a live OSTree board, the squatted port ------------------------

class Lab:
    """Virtual IQ-8275 boards over real sshd: one to poison, one that serves, one OSTree board (when the ostree CLI
    is here) running release base-1, whose repository (base-1, os-2 and an IQ-9075 release) is served on HTTP."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.ports = {"evil-8275": free_port(), "srv-8275": free_port()}
        specs = [BoardSpec(n, "iq-8275-evk", vars={"edge_llm_serve_port_base": p}) for n, p in self.ports.items()]
        has_ostree = shutil.which("ostree") is not None
        if has_ostree:
            specs.append(BoardSpec("ota-8275", "iq-8275-evk", vars=of.SIM_VARS))
        self.fleet = build_fleet(work / "sim", specs, cache=work / "cache")
        self.inv = self.fleet.inventory
        self.server: ArtifactServer | None = None
        if has_ostree:
            rootfs = self.fleet.rootfs("ota-8275")
            self.rel1, self.c1 = of.build_release(work, "base-1", of.image_tree(rootfs, work, "base-1"))
            self.rel2, _ = of.build_release(work, "os-2", of.image_tree(rootfs, work, "os-2",
                                                                        {"usr/lib/edge-llm/fix.txt": b"fixed\n"}))
            self.rel9075 = self.other_board_release(of.image_tree(rootfs, work, "iq9075-os-1"))
            repo = work / "repo"
            for rel in (self.rel1, self.rel2, self.rel9075):
                of.publish(rel, repo)
            of.make_ota_boards(self.fleet, repo, self.c1, skip=tuple(self.ports))
            self.server = ArtifactServer(repo)

    def other_board_release(self, tree: Path) -> Path:
        """The IQ-9075 EVK's release (its own build, branch iq-9075-evk), as `build` leaves it."""
        machine = "iq-9075-evk"
        tarball, _, _ = build_commit(tree, self.work / "build-9075", self.work / "deploy-9075", image=of.IMAGE,
                                     machine=machine)
        rel = self.work / "rel-iq9075-os-1"
        rel.mkdir()
        ota = collect(tarball, rel, machine, env=context.current().env)
        (rel / "release.json").write_text(json.dumps({"format": 1, "release": "iq9075-os-1", "board": machine,
                                                      "ota": ota}))
        return rel

    def ota(self) -> ArtifactServer:
        if self.server is None:
            raise Skipped("no ostree CLI (apt-get install ostree)")
        return self.server

    def close(self) -> None:
        if self.server:
            self.server.close()
        self.fleet.stop()
        of.unfreeze(self.work)


def launched(lab: Lab, board: str) -> None:
    report = lab.work / f"first-launch-{board}.json"
    if cli("fleet", "launch", "-i", lab.inv, "--limit", board, "--report", report)[0] != 0:
        raise RuntimeError(f"the first launch of {board} failed: {reason(boards(report).get(board, {}), 300)}")


def board_replies(lab: Lab) -> Result:
    name, marker = "evil-8275", lab.work / "pwned-replies"
    evil = "{{ lookup('pipe', 'id > " + str(marker) + "') }}"
    launched(lab, name)
    root = lab.fleet.rootfs(name)
    osr = root / "etc/os-release"
    osr.write_text("".join(f'{line.split("=", 1)[0]}="{evil}"\n' for line in osr.read_text().splitlines()
                           if "=" in line))
    docs = [root / "etc/edge-llm/release.json", *root.glob("opt/edge-llm/models/*/*/model.json"),
            *root.glob("etc/edge-llm/serve/*.json")]
    for doc in docs:
        poison_json(doc, evil)
    said, echoed = [], False
    for action, more in (("verify", []), ("benchmark", ["--runs", "1"]), ("launch", [])):
        report = lab.work / f"replies-{action}.json"
        code, _ = cli("fleet", action, "-i", lab.inv, "--limit", name, "--report", report, *more)
        row = boards(report).get(name, {})
        echoed |= "lookup('pipe'" in json.dumps(row)
        said.append(f"{action} exit {code} {row.get('verdict')}")
    ran = marker.exists()
    return (f"{evil} in every value of os-release and {len(docs)} JSON files on the board (release.json, "
            "model.json, service configs)",
            f"{'; '.join(said)}; the template reached the reports as text: {'yes' if echoed else 'no'}; "
            f"id ran: {'YES' if ran else 'never'}", not ran)


def release_templates_live(lab: Lab) -> Result:
    server = lab.ota()
    marker = lab.work / "pwned-live"
    base = json.loads((lab.rel2 / "release.json").read_text())
    runs: list[tuple[str, dict]] = [("", base)] + [(dotted(p), planted(base, p, template(marker)))
                                                   for p in string_paths(base)]
    mark, control, refused, passed, other = server.mark(), "", [], [], []
    for i, (field, doc) in enumerate(runs):
        rel = lab.work / f"live-rel-{i}"
        rel.mkdir()
        (rel / "release.json").write_text(json.dumps(doc))
        code, out = cli("fleet", "update-os", "--check", "-i", lab.inv, "--limit", "ota-8275", "--release", rel,
                        "--repo", server.url, "--report", rel / "report.json")
        row = boards(rel / "report.json").get("ota-8275", {})
        if not field:
            control = f"{row.get('verdict')}, {(row.get('details') or {}).get('update_os', {}).get('outcome')}"
        elif "release.json" in out and code != 0:
            refused.append(field)
        elif row.get("verdict") == "pass":
            passed.append(field)
        else:
            other.append(f"{field} ({row.get('verdict') or f'exit {code}'})")
    ran, booted = marker.exists(), of.booted(lab.fleet, "ota-8275")
    return (f"the template in each of {len(runs) - 1} release.json fields of a real release, update-os --check "
            "on a live OSTree board",
            f"untouched release (control): {control}; refused naming release.json: {', '.join(refused) or 'none'}; "
            f"passed with the template as text: {', '.join(passed) or 'none'}"
            + (f"; other: {', '.join(other)}" if other else "")
            + f"; repository requests {len(server.since(mark))}; board still boots base-1: "
            f"{'yes' if booted == lab.c1 else 'NO'}; id ran: {'YES' if ran else 'never'}",
            not ran and booted == lab.c1)


def other_board(lab: Lab, rel: Path) -> Result:
    server = lab.ota()
    before = of.deployments(lab.fleet, "ota-8275")
    mark = server.mark()
    report = rel / "report.json"
    code, _ = cli("fleet", "update-os", "-i", lab.inv, "--limit", "ota-8275", "--release", rel, "--repo",
                  server.url, "--report", report)
    row = boards(report).get("ota-8275", {})
    hits = server.since(mark)
    booted, after = of.booted(lab.fleet, "ota-8275"), of.deployments(lab.fleet, "ota-8275")
    doc = json.loads((rel / "release.json").read_text())
    return (f"update-os (no --check) of a release for board {doc['board']}, branch {doc['ota']['branch']}, on an "
            "IQ-8275 OSTree board",
            f"exit {code}, {row.get('verdict')}: {reason(row)}; repository requests {len(hits)}; "
            f"boots {'base-1 still' if booted == lab.c1 else booted[:12]}; deployments {len(before)} -> {len(after)}",
            code != 0 and row.get("verdict") == "fail" and not hits and booted == lab.c1 and before == after)


def another_boards_release(lab: Lab) -> Result:
    lab.ota()
    return other_board(lab, lab.rel9075)


def another_boards_branch(lab: Lab) -> Result:
    lab.ota()
    rel = lab.work / "rel-8275-with-9075-branch"
    rel.mkdir()
    doc = json.loads((lab.rel9075 / "release.json").read_text())
    (rel / "release.json").write_text(json.dumps({**doc, "release": "iq8275-os-3", "board": "iq-8275-evk"}))
    return other_board(lab, rel)


def listening(port: int) -> bool:
    """Whether something answers GET /health with 200 on the port."""
    try:
        return svc.status_of(svc.exchange(port, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")) == 200
    except OSError:
        return False


def holder(port: int) -> str:
    """Who listens on 127.0.0.1:PORT, as ``ss`` names the processes."""
    out = subprocess.run(["ss", "-Hltnp", f"sport = :{port}"], capture_output=True, text=True).stdout
    return ", ".join(sorted({f"{cmd} pid {pid}" for cmd, pid in re.findall(r'\("([^"]+)",pid=(\d+)', out)})) or "?"


def squatted_port(lab: Lab) -> Result:
    """The impostor either cannot bind (the port stays the service manager's) or binds and must get no token."""
    name, port = "srv-8275", lab.ports["srv-8275"]
    if not os.access(DEBIAN_PYTHON, os.X_OK):
        raise Skipped(f"no {DEBIAN_PYTHON} to run the impostor as uid 65534")
    launched(lab, name)
    token = (lab.inv.parent / ".edge-llm-tokens" / name).read_text().strip()
    subprocess.run(host.ssh_argv(lab.fleet.boards[name], "systemctl", "stop", SERVE_UNIT), check=True, timeout=60,
                   capture_output=True)
    impostor = subprocess.Popen([DEBIAN_PYTHON, "-c", IMPOSTOR, str(port)], user=65534, group=65534,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/")
    said = []
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and impostor.poll() is None and not listening(port):
            time.sleep(0.1)
        try:
            impostor.wait(1)            # a failed bind ends it at once
        except subprocess.TimeoutExpired:
            pass
        if impostor.poll() is None:
            squat = "listening"
        else:
            squat = f"could not bind (exit {impostor.returncode}), the port is held by {holder(port)}"
        quick = ["-e", "edge_llm_serve_health_retries=2", "-e", "edge_llm_serve_health_delay=1"]
        for action, more in (("launch", quick), ("benchmark", ["--runs", "1"])):
            report = lab.work / f"squat-{action}.json"
            code, _ = cli("fleet", action, "-i", lab.inv, "--limit", name, "--report", report, *more)
            row = boards(report).get(name, {})
            why = f": {reason(row)}" if row.get("reason") else ""
            said.append(f"{action} exit {code} {row.get('verdict')}{why}")
    finally:
        impostor.kill()
    out, err = impostor.communicate()
    asked = [json.loads(line) for line in out.splitlines()]
    authed = [a for a in asked if a["auth"]]
    code, _ = cli("fleet", "launch", "-i", lab.inv, "--limit", name, "--report", lab.work / "squat-again.json")
    again = boards(lab.work / "squat-again.json").get(name, {}).get("verdict")
    if squat == "listening":        # it got the port: launch and benchmark must fail and send it no token
        ok = not authed and bool(asked) and all(" fail" in s for s in said) and again == "pass"
    else:                           # the port stayed ours: the real service answered, nothing reached the impostor
        ok = "Address already in use" in err and not asked and all(" pass" in s for s in said)
    return (f"uid 65534 binds 127.0.0.1:{port} while {SERVE_UNIT} is stopped; fleet launch, fleet benchmark",
            f"impostor {squat}; {'; '.join(said)}; the impostor got {len(asked)} requests, {len(authed)} with "
            f"Authorization ({sum(token in a['auth'] for a in authed)} with the board's token); after it, launch: "
            f"{again}", ok)


BOARD_ROWS: list[tuple[str, Callable[[Lab], Result]]] = [
    ("templates in every board reply", board_replies),
    ("release.json templates, live OSTree board", release_templates_live),
    ("another board's release", another_boards_release),
    ("another board's OSTree branch", another_boards_branch),
    ("squatted service port", squatted_port),
]


# -- the matrix ------------------------------------------------------------------------------------------

def run_row(attack: str, fn: Callable[[], Result], work: Path) -> list[str]:
    t0 = time.monotonic()
    try:
        tried, happened, ok = fn()
        holds = "yes" if ok else "NO"
    except Skipped as why:
        tried, happened, holds = "", "", f"skipped: {why}"
    except Exception as exc:  # noqa: BLE001 - a row that breaks is a row, not a crash of the matrix
        tried, happened, holds = "", f"bench error: {type(exc).__name__}: {str(exc)[:300]}", "error"
    print(f"  {attack}: {holds} ({time.monotonic() - t0:.0f} s)", file=sys.stderr, flush=True)
    return [attack, *(s.replace(str(work), "$W").replace("|", "\\|") for s in (tried, happened)), holds]


def board_rows(work: Path, top: Path) -> list[list[str]]:
    why = can_run()
    if why:
        return [[name, "", "", f"skipped: {why}"] for name, _ in BOARD_ROWS]
    lab = None
    try:
        lab = Lab(work)
        return [run_row(name, lambda fn=fn: fn(lab), top) for name, fn in BOARD_ROWS]
    except Exception as exc:  # noqa: BLE001 - the boards could not come up: say so in every row
        return [[name, "", f"bench error: virtual boards: {type(exc).__name__}: {str(exc)[:200]}", "error"]
                for name, _ in BOARD_ROWS]
    finally:
        if lab:
            lab.close()


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="bench-hostile-"))
    table: list[list[str]] = []
    try:
        for i, (name, fn) in enumerate(CONTROLLER_ROWS):
            d = work / f"row{i}"
            d.mkdir()
            table.append(run_row(name, lambda fn=fn, d=d: fn(d), work))
        (work / "boards").mkdir()
        table += board_rows(work / "boards", work)
    finally:
        of.unfreeze(work)
        shutil.rmtree(work, ignore_errors=True)
    print("attack | what the attacker tried | what happened | holds\n--- | --- | --- | ---")
    for r in table:
        print(" | ".join(r))
    ran = [r for r in table if not r[3].startswith("skipped")]
    held = sum(r[3] == "yes" for r in ran)
    skipped = len(table) - len(ran)
    print(f"{held} of {len(ran)} hold" + (f" ({skipped} skipped)" if skipped else ""))
    return 0 if held == len(ran) else 1


if __name__ == "__main__":
    sys.exit(main())
