"""`provisioner build` against the REAL kas-container script with a recording stand-in engine.

No container engine exists here, so a small script named ``docker`` (and ``podman``) sits first
on PATH: it answers the queries kas-container makes, records the ``run`` command line, replays a
recorded bitbake output and drops a flash bundle into the mounted build folder. Its settings are
in ``standin.json`` beside it (:func:`standin`), not in the environment kas-container passes on.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import pytest

from provisioner import context
from provisioner.cli import main
from provisioner.errors import BuildError
from provisioner.image import build as B
from provisioner.manifest import load_manifest
from tests.image.test_release import make_bundle, make_tarball

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "bitbake"
STANDIN = FIX / "standin_engine.py"
BUNDLE = "qcom-multimedia-image-iq-8275-evk"


@pytest.fixture
def env(tmp_path, monkeypatch):
    """PATH with the stand-in engines first; recording file; a bundle the 'build' produces."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in ("docker", "podman"):
        (bindir / name).symlink_to(STANDIN)
    record = tmp_path / "record.jsonl"
    tarball = make_tarball(make_bundle(tmp_path / "deploy-src"), tmp_path / f"{BUNDLE}.rootfs.qcomflash.tar.gz")
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("KAS_ALLOW_ROOT", "yes")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("KAS_CONTAINER_ENGINE", raising=False)
    # CI disks are small: the free-space floor is tested on its own, not by every build
    cfg = tmp_path / "host-build.yaml"
    cfg.write_text("min_free_gb: 0\nwarn_free_gb: 0\n")
    monkeypatch.setenv("PROVISIONER_BUILD_CONFIG", str(cfg))
    for var in ("http_proxy", "https_proxy", "no_proxy", "SSTATE_MIRRORS", "BB_NUMBER_THREADS"):
        monkeypatch.delenv(var, raising=False)
    ns = SimpleNamespace(bindir=bindir, record=record, tarball=tarball, tmp=tmp_path)
    standin(ns, RECORD=str(record), OUTPUT=str(FIX / "success.log"), BUNDLE=str(tarball))
    return ns


def standin(env: SimpleNamespace, **settings: str | None) -> None:
    """Change the stand-in engine's settings (``None`` removes one): the file it reads beside itself."""
    path = env.bindir / "standin.json"
    cfg = json.loads(path.read_text()) if path.exists() else {}
    cfg.update(settings)
    path.write_text(json.dumps({k: v for k, v in cfg.items() if v is not None}))


_MODEL: list[Path] = []


def synthetic_model() -> Path:
    """One real .litertlm (litert-lm-builder via the simulator helpers), made once per test session."""
    if not _MODEL:
        import tempfile

        from provisioner.sim.synthetic_models import make_litertlm
        _MODEL.append(make_litertlm(Path(tempfile.mkdtemp(prefix="edge-llm-test-model-")) / "m.litertlm"))
    return _MODEL[0]


def write_manifest(tmp: Path, build: str = "", engine: str = "docker", board: str = "iq-8275-evk") -> Path:
    model = tmp / "m.litertlm"
    if not model.exists():
        shutil.copy(synthetic_model(), model)
    text = f"""manifest: 1
release: rel-7
board: {board}
qairt: ["2.44.0.260225"]
models:
  - {{name: gemma-4-e2b, kind: litertlm, path: m.litertlm, qairt: "2.44.0.260225"}}
build:
  engine: {engine}
  work_dir: w/kas
  build_dir: w/build
  dl_dir: w/downloads
  sstate_dir: w/sstate
{build}"""
    p = tmp / "manifest.yaml"
    p.write_text(text)
    return p


def runs(record: Path) -> list[dict]:
    if not record.exists():
        return []
    return [r for r in map(json.loads, record.read_text().splitlines()) if r["kind"] == "run"]


def pairs(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]


def do_build(manifest: Path, out: Path, **kw):
    return B.build(manifest, out, context.current(B.Reporter(quiet=True)),
                   host_config={"min_free_gb": 0, **kw.pop("host_config", {})}, **kw)


def test_build_runs_real_kas_container_and_collects_release(env, tmp_path):
    mirror = tmp_path / "nfs-sstate"
    mirror.mkdir()
    m = write_manifest(tmp_path, f"""  repo_ref_dir: w/ref
  threads: 8
  parallel_make: 6
  sstate_mirrors: ["file://{mirror}/PATH", "https://sstate.example.lan/wrynose/PATH;downloadfilename=PATH"]
  hashserve: hashserv.example.lan:8686
""")
    # a layer checkout kas would have made in the work folder
    repo = tmp_path / "w" / "kas" / "meta-qcom"
    repo.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q",
                    "--allow-empty", "-m", "x"], check=True)
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()

    result = do_build(m, tmp_path / "out")
    assert result.ok and result.release_dir == tmp_path / "out" / "rel-7"

    [run] = runs(env.record)
    argv = run["argv"]
    w = tmp_path / "w"
    vols = pairs(argv, "-v")
    assert f"{w / 'kas'}:/work:rw" in vols
    assert f"{w / 'build'}:/build:rw" in vols and f"{w / 'downloads'}:/downloads:rw" in vols
    assert f"{w / 'sstate'}:/sstate:rw" in vols and f"{w / 'ref'}:/repo-ref:rw" in vols
    assert f"{mirror}:{mirror}:ro" in vols            # file:// mirror reachable at the same path
    es = pairs(argv, "-e")
    assert {"KAS_WORK_DIR=/work", "KAS_BUILD_DIR=/build", "DL_DIR=/downloads", "SSTATE_DIR=/sstate",
            "KAS_REPO_REF_DIR=/repo-ref", "BB_NUMBER_THREADS=8", "PARALLEL_MAKE=-j 6",
            "BB_HASHSERVE=hashserv.example.lan:8686"} <= set(es)
    assert (f"SSTATE_MIRRORS=file://.* file://{mirror}/PATH file://.* "
            "https://sstate.example.lan/wrynose/PATH;downloadfilename=PATH") in es
    assert "--network=host" not in argv               # the hash server is not on loopback
    i = argv.index("ghcr.io/siemens/kas/kas:5.5")
    assert argv[i + 1] == "build" and argv[i + 2].startswith("/repo/") and argv[i + 2].endswith(".yml")
    assert run["engine"] == "docker"

    rel = json.loads((result.release_dir / "release.json").read_text())
    assert rel["build"]["sstate"] == {"wanted": 2163, "local": 1700, "mirrors": 300, "missed": 163,
                                      "current": 1289, "match_pct": 92, "complete_pct": 97}
    assert rel["build"]["tasks"]["total"] == 3452 and rel["build"]["engine"] == "docker"
    assert rel["build"]["versions"]["bitbake"] == "2.18.0" and rel["build"]["versions"]["kas"]
    assert pairs(argv, "--name")[0].startswith("edge-llm-rel-7-")
    # the real checkout wins over what bitbake printed; other layers come from bitbake's config block
    assert rel["layers"]["meta-qcom"] == head
    assert rel["layers"]["meta-edge-llm"] == "0123456789abcdef0123456789abcdef01234567"
    assert (result.release_dir / "kas" / "edge-llm.lock.yml").is_file()
    kas_text = (result.release_dir / "kas" / "edge-llm.yml").read_text()    # the rendered kas file, kept
    assert 'BB_HASHSERVE = "hashserv.example.lan:8686"' in kas_text and "OEEquivHash" in kas_text
    assert rel["bundle"] == f"flash/{BUNDLE}" and len(rel["artifacts"]) == 17
    log = (result.release_dir / "logs" / "build.log").read_text()
    assert "Tasks Summary: Attempted 3452" in log and "kas-container" in log.splitlines()[1]


def test_download_token_never_reaches_the_container_engine(env, tmp_path, monkeypatch):
    """kas-container (and `docker info`) get a whitelist of our environment: what kas-container reads."""
    netrc = tmp_path / "netrc"
    netrc.write_text("machine git.lan login ci password x\n")
    monkeypatch.setenv("PROVISIONER_HTTP_TOKEN", "tok-s3cret")
    monkeypatch.setenv("PROVISIONER_CONSOLE_PASSWORD", "root-pw")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-s3cret")
    monkeypatch.setenv("NETRC_FILE", str(netrc))
    monkeypatch.setenv("TZ", "Europe/Berlin")
    do_build(write_manifest(tmp_path), tmp_path / "out")
    rows = [json.loads(ln) for ln in env.record.read_text().splitlines()]
    seen = [r["environ"] for r in rows if r["kind"] in ("info", "run")]
    assert len(seen) == 2
    for environ in seen:
        assert not {"PROVISIONER_HTTP_TOKEN", "PROVISIONER_CONSOLE_PASSWORD", "AWS_SECRET_ACCESS_KEY"} & set(environ)
        assert not any("s3cret" in v or "root-pw" in v for v in environ.values())
    [run] = runs(env.record)
    # what kas-container itself reads still reaches it: the netrc is mounted, TZ forwarded
    assert f"{netrc}:/var/kas/userdata/.netrc:ro" in pairs(run["argv"], "-v")
    assert "TZ=Europe/Berlin" in pairs(run["argv"], "-e")
    assert run["environ"]["KAS_CONTAINER_ENGINE"] == "docker" and run["environ"]["HOME"] == str(tmp_path / "home")


def test_build_is_a_job_of_named_steps(env, tmp_path, capsys):
    """prepare -> kas-container -> collect through the one step machinery; a failure stops before collect."""
    events: list[tuple[str, str]] = []
    do_build(write_manifest(tmp_path), tmp_path / "out", on_event=lambda ev: events.append((ev.step, ev.kind)))
    assert events == [("prepare", "start"), ("prepare", "stop"), ("kas-container", "start"),
                      ("kas-container", "stop"), ("collect", "start"), ("collect", "stop")]
    events.clear()
    do_build(write_manifest(tmp_path), tmp_path / "out2", dry_run=True,
             on_event=lambda ev: events.append((ev.step, ev.kind)))
    assert events == [("prepare", "start"), ("prepare", "stop")]
    events.clear()
    standin(env, OUTPUT=str(FIX / "failure.log"), RC="1", BUNDLE=None)
    with pytest.raises(BuildError, match="do_compile failed"):
        do_build(write_manifest(tmp_path), tmp_path / "out3", on_event=lambda ev: events.append((ev.step, ev.kind)))
    assert events[-1] == ("kas-container", "error") and not any(s == "collect" for s, _ in events)
    # the CLI shows the steps as numbered progress lines, as litert build does
    capsys.readouterr()
    standin(env, OUTPUT=str(FIX / "success.log"), RC="0", BUNDLE=str(env.tarball))
    assert main(["build", str(write_manifest(tmp_path)), "--out", str(tmp_path / "out4")]) == 0
    err = capsys.readouterr().err
    assert "[1/3] render kas configuration for rel-7 (iq-8275-evk)" in err
    assert "[2/3] kas-container build (docker) -> log" in err and "[3/3] collecting the release" in err
    assert f"release: {tmp_path / 'out4' / 'rel-7'}" in err.replace("\n", "")


def test_podman_custom_image_and_dirs_inside_work(env, tmp_path, monkeypatch):
    m = tmp_path / "manifest.yaml"
    write_manifest(tmp_path, engine="podman")
    text = m.read_text().replace("build_dir: w/build", "build_dir: w/kas/build").replace(
        "dl_dir: w/downloads", "dl_dir: w/kas/downloads") + "  container_image: registry.lan/kas:5.5-qli\n" \
        "  hashserve: 127.0.0.1:8686\n"
    m.write_text(text)
    do_build(m, tmp_path / "out")
    [run] = runs(env.record)
    argv = run["argv"]
    assert run["engine"] == "podman"
    assert "--userns=keep-id" in argv and "label=disable" in pairs(argv, "--security-opt")
    assert "registry.lan/kas:5.5-qli" in argv
    es = pairs(argv, "-e")
    # inside the work folder: no extra mount, kas sees them below /work
    assert "DL_DIR=/work/downloads" in es and "KAS_BUILD_DIR=/work/build" in es
    assert not any(v.endswith(":/downloads:rw") for v in pairs(argv, "-v"))
    assert "--network=host" in argv                   # loopback hash server must be reachable
    assert (tmp_path / "out" / "rel-7" / "release.json").is_file()


def test_engine_from_environment_overrides_manifest(env, tmp_path, monkeypatch):
    monkeypatch.setenv("KAS_CONTAINER_ENGINE", "podman")
    do_build(write_manifest(tmp_path, engine="docker"), tmp_path / "out")
    assert runs(env.record)[0]["engine"] == "podman"


def test_dry_run_prints_command_and_runs_nothing(env, tmp_path, capsys, monkeypatch):
    m = write_manifest(tmp_path, "  threads: 4\n")
    plan = do_build(m, tmp_path / "out", dry_run=True)
    assert isinstance(plan, B.BuildSetup)
    assert plan.argv[0].endswith("kas-container") and plan.argv[-2] == "build"
    assert plan.env["KAS_CONTAINER_ENGINE"] == "docker" and plan.env["BB_NUMBER_THREADS"] == "4"
    assert plan.env["SSTATE_DIR"] == str(tmp_path / "w" / "sstate")
    assert not (tmp_path / "w" / "sstate").exists()   # nothing created
    assert runs(env.record) == [] and not env.record.exists()   # not even `docker info`
    line = plan.command_line()
    assert "KAS_WORK_DIR=" in line and line.endswith(f"build {plan.kas_file}")


def test_cli_dry_run_json(env, tmp_path, capsys):
    rc = main(["build", str(write_manifest(tmp_path)), "--out", str(tmp_path / "out"), "--dry-run", "--json"])
    assert rc == 0
    data = json.loads(capsys.readouterr().out)
    assert data["engine"] == "docker" and data["argv"][-2] == "build" and data["machine"] == "iq-8275-evk"


def test_failed_task_shows_task_and_log_keeps_full_log(env, tmp_path, monkeypatch):
    standin(env, OUTPUT=str(FIX / "failure.log"), RC="1", BUNDLE=None)
    with pytest.raises(BuildError) as exc:
        do_build(write_manifest(tmp_path), tmp_path / "out")
    msg = str(exc.value)
    assert "linux-qcom_6.18.bb:do_compile failed with exit code 1" in msg
    # the task log as a host path (bitbake printed the container's /build/...)
    assert f"{tmp_path}/w/build/tmp/work/iq_8275_evk-qcom-linux/linux-qcom/6.18/temp/log.do_compile.48213" in msg
    log = tmp_path / "out" / "logs" / "rel-7.build.log"
    assert "implicit declaration of function" in log.read_text()     # the full log is kept
    summary = json.loads(log.with_suffix(".json").read_text())
    assert summary["status"] == "failed" and summary["sstate"]["match_pct"] == 0
    assert not (tmp_path / "out" / "rel-7").exists()                   # no half release
    report = B.failure_report(log)
    assert any(ln.startswith("ERROR: Logfile of failure stored in:") for ln in report)
    assert any("qcom_scm_pas_shutdown_retry" in ln for ln in report)


def test_no_engine_at_all(env, tmp_path, monkeypatch):
    empty = tmp_path / "emptybin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    m = write_manifest(tmp_path).read_text().replace("  engine: docker\n", "")
    (tmp_path / "manifest.yaml").write_text(m)
    with pytest.raises(BuildError, match="no container engine found"):
        do_build(tmp_path / "manifest.yaml", tmp_path / "out")


def test_engine_binary_missing(env, tmp_path, monkeypatch):
    (env.bindir / "podman").unlink()
    monkeypatch.setenv("PATH", str(env.bindir))
    with pytest.raises(BuildError, match="'podman' is not installed"):
        do_build(write_manifest(tmp_path, engine="podman"), tmp_path / "out")


def test_daemon_not_running(env, tmp_path, monkeypatch):
    standin(env, DAEMON_DOWN="1")
    with pytest.raises(BuildError, match="daemon is not usable.*Cannot connect to the Docker daemon"):
        do_build(write_manifest(tmp_path), tmp_path / "out")
    assert runs(env.record) == []


@pytest.mark.parametrize("dirs,match", [
    ({"dl_dir": "w/sstate"}, "DL_DIR=.* and SSTATE_DIR=.* overlap"),
    ({"sstate_dir": "w/downloads/sstate"}, "overlap"),
    ({"work_dir": "w/downloads/kas"}, "DL_DIR=.* contains KAS_WORK_DIR"),
])
def test_overlapping_dirs_refused(env, tmp_path, dirs, match):
    m = write_manifest(tmp_path)
    text = m.read_text()
    for k, v in dirs.items():
        text = "\n".join(f"  {k}: {v}" if ln.startswith(f"  {k}:") else ln for ln in text.splitlines()) + "\n"
    m.write_text(text)
    with pytest.raises(BuildError, match=match):
        do_build(m, tmp_path / "out")
    assert runs(env.record) == []


def test_not_enough_disk(env, tmp_path):
    with pytest.raises(BuildError, match="GB free"):
        do_build(write_manifest(tmp_path), tmp_path / "out", host_config={"min_free_gb": 10 ** 9})
    plan = B.prepare_build(load_manifest(write_manifest(tmp_path)), tmp_path / "out",
                           host_config={"min_free_gb": 0, "warn_free_gb": 10 ** 9}, dry_run=True,
                           env=context.current().env)
    assert any("cold QLI build wants ~250 GB" in w for w in plan.warnings)


def test_root_without_allow_root_refused(env, tmp_path, monkeypatch):
    if os.geteuid() != 0:
        pytest.skip("needs root")
    monkeypatch.delenv("KAS_ALLOW_ROOT")
    with pytest.raises(BuildError, match="running as root"):
        do_build(write_manifest(tmp_path), tmp_path / "out")


def test_host_config_file_fills_folders(env, tmp_path):
    cfg = tmp_path / "build.yaml"
    cfg.write_text("dl_dir: /srv/dl-cache\nsstate_dir: cache/sstate\nthreads: 3\n")
    host = B.load_host_config(cfg, env=context.current().env)
    assert host["dl_dir"] == Path("/srv/dl-cache") and host["sstate_dir"] == tmp_path / "cache" / "sstate"
    manifest = load_manifest(write_manifest(tmp_path))
    dirs = B.resolve_dirs(manifest, host, {"HOME": str(tmp_path)})
    assert dirs.dl == tmp_path / "w" / "downloads"      # the manifest's explicit value wins
    # a hash server known only to this host still reaches local.conf (kas does not forward BB_HASHSERVE)
    plan = B.prepare_build(manifest, tmp_path / "out", host_config={"hashserve": "cachehost:8686", "min_free_gb": 0},
                           dry_run=True, env=context.current().env)
    assert plan.env["BB_HASHSERVE"] == "cachehost:8686"
    assert 'BB_HASHSERVE = "cachehost:8686"' in plan.kas_file.read_text()
    cfg.write_text("bogus: 1\n")
    with pytest.raises(BuildError, match="unknown key"):
        B.load_host_config(cfg, env=context.current().env)


def test_ctrl_c_stops_container_and_says_how_to_resume(env, tmp_path):
    """SIGINT to `provisioner build`: bitbake gets SIGINT, exit 130, resume hint, log kept."""
    m = write_manifest(tmp_path)
    out = tmp_path / "out"
    script = ("import sys; from provisioner.cli import main; "
              f"sys.exit(main(['build', {str(m)!r}, '--out', {str(out)!r}]))")
    standin(env, HOLD="1")
    penv = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    proc = subprocess.Popen([sys.executable, "-c", script], env=penv, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    log = out / "logs" / "rel-7.build.log"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if log.exists() and "Tasks Summary" in log.read_text():
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "run the same `provisioner build` command again" in err
    kinds = [json.loads(ln)["kind"] for ln in env.record.read_text().splitlines()]
    assert "sigint" in kinds                           # bitbake (the stand-in) was asked to stop
    text = log.read_text()
    assert "Keyboard Interrupt, closing down" in text and "stopped by the user" in text
    assert json.loads(log.with_suffix(".json").read_text())["status"] == "interrupted"
    assert not (out / "rel-7").exists()


def test_ssh_dir_and_unix_hashserve_reach_the_container(env, tmp_path):
    ssh = tmp_path / "ssh"
    ssh.mkdir()
    (ssh / "known_hosts").write_text("git.lan ssh-ed25519 AAAA\n")
    sock_dir = tmp_path / "run" / "hashserv"
    sock_dir.mkdir(parents=True)
    m = write_manifest(tmp_path, f"  ssh_dir: {ssh}\n  hashserve: unix://{sock_dir}/hashserve.sock\n")
    do_build(m, tmp_path / "out")
    [run] = runs(env.record)
    vols = pairs(run["argv"], "-v")
    assert f"{ssh}:/var/kas/userdata/.ssh:ro" in vols                 # kas-container's --ssh-dir mount
    assert f"{sock_dir}:{sock_dir}:rw" in vols                         # the socket path works inside too
    assert f"BB_HASHSERVE=unix://{sock_dir}/hashserve.sock" in pairs(run["argv"], "-e")
    m.write_text(m.read_text().replace(f"  ssh_dir: {ssh}\n", f"  ssh_dir: {tmp_path / 'nossh'}\n"))
    with pytest.raises(BuildError, match="ssh_dir .* is not a folder"):
        do_build(m, tmp_path / "out")


def test_ctrl_c_escalates_to_engine_stop_when_bitbake_ignores_sigint(env, tmp_path):
    """A container that ignores SIGINT is stopped with `<engine> stop <name>` after the grace period."""
    m = write_manifest(tmp_path)
    out = tmp_path / "out"
    cfg = tmp_path / "build.yaml"
    cfg.write_text("interrupt_grace_s: 1\nmin_free_gb: 0\n")
    script = ("import sys; from provisioner.cli import main; "
              f"sys.exit(main(['build', {str(m)!r}, '--out', {str(out)!r}]))")
    standin(env, HOLD="1", IGNORE_INT="1")
    penv = dict(os.environ, PROVISIONER_BUILD_CONFIG=str(cfg), PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    proc = subprocess.Popen([sys.executable, "-c", script], env=penv, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    log = out / "logs" / "rel-7.build.log"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (log.exists() and "Tasks Summary" in log.read_text()):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    rows = [json.loads(ln) for ln in env.record.read_text().splitlines()]
    kinds = [r["kind"] for r in rows]
    assert kinds.index("sigint-ignored") < kinds.index("stop") < kinds.index("sigterm")
    name = pairs(runs(env.record)[0]["argv"], "--name")[0]
    assert next(r for r in rows if r["kind"] == "stop")["argv"] == ["stop", "-t", "30", name]


def test_litert_runtime_in_host_dl_dir_pins_its_sha256(env, tmp_path):
    """`provisioner litert build` output in DL_DIR (from the host config) -> the recipe gets its sha256."""
    from provisioner.image import litert

    m = write_manifest(tmp_path)
    m.write_text(m.read_text().replace("  dl_dir: w/downloads\n", ""))
    dl = tmp_path / "host-dl"
    f = tmp_path / "litert_lm_main"
    f.write_bytes(b"\x7fELF")
    sha = litert.write_tarball({"bin/litert_lm_main": f}, dl / litert.tarball_name())
    plan = B.prepare_build(load_manifest(m), tmp_path / "out", host_config={"dl_dir": dl, "min_free_gb": 0},
                           dry_run=True, env=context.current().env)
    assert plan.env["DL_DIR"] == str(dl)
    assert f'LITERT_LM_RUNTIME_SHA256 = "{sha}"' in plan.kas_file.read_text()


def test_cli_build_json_result(env, tmp_path, capsys):
    rc = main(["build", str(write_manifest(tmp_path)), "--out", str(tmp_path / "out"), "--json"])
    assert rc == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] and data["release_dir"] == str(tmp_path / "out" / "rel-7")
    assert data["summary"]["sstate"]["match_pct"] == 92 and data["summary"]["status"] == "ok"


def test_cli_build_without_out_writes_releases_beside_the_manifest_not_the_current_directory(
        env, tmp_path, capsys, monkeypatch):
    """Run from a checkout (any current directory), the release lands in ``releases/`` beside the manifest."""
    cwd = tmp_path / "checkout"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    manifest = write_manifest(tmp_path)
    rc = main(["build", str(manifest), "--json"])
    assert rc == 0
    data = json.loads(capsys.readouterr().out)
    assert data["release_dir"] == str(manifest.parent / "releases" / "rel-7")
    assert (manifest.parent / "releases" / "rel-7" / "release.json").is_file()
    assert list(cwd.iterdir()) == []


def test_the_default_release_folder_is_ignored_by_git(repo_root):
    """``provisioner build examples/X.yaml`` writes examples/releases/: never untracked output in the checkout."""
    ignored = [ln.strip() for ln in (repo_root / ".gitignore").read_text().splitlines()]
    assert "releases/" in ignored

def _sota_manifest(tmp_path: Path) -> Path:
    m = write_manifest(tmp_path)
    m.write_text(m.read_text() + "image:\n  ota: ostree\n")
    return m


@pytest.mark.skipif(shutil.which("ostree") is None, reason="needs the ostree CLI")
def test_sota_build_collects_the_ostree_commit_into_the_release(env, tmp_path):
    """image.ota: ostree -> the deploy folder's ostreecommit.tar.xz lands in <release>/ostree/ and release.json."""
    from provisioner.ota.commit import collect
    from provisioner.sim.ostree_image import build_commit

    tree = tmp_path / "rootfs"
    (tree / "etc").mkdir(parents=True)
    (tree / "etc/os-release").write_text('ID=qcom-distro\nBUILD_ID="rel-7"\n')
    (tree / "usr/lib/edge-llm/opt/qairt/2.44.0.260225").mkdir(parents=True)
    (tree / "usr/lib/edge-llm/opt/qairt/2.44.0.260225/VERSION").write_text("2.44.0.260225\n")
    deploy = tmp_path / "w" / "build" / "tmp" / "deploy" / "images" / "iq-8275-evk"   # the host side of /build
    tarball, commit, _ = build_commit(tree, tmp_path / "ostree-work", deploy, image="edge-llm-image",
                                      machine="iq-8275-evk")
    assert tarball.name == "edge-llm-image-iq-8275-evk.rootfs.ostreecommit.tar.xz"
    result = do_build(_sota_manifest(tmp_path), tmp_path / "out",
                      ota_collector=partial(collect, env=context.current().env))
    rel = json.loads((result.release_dir / "release.json").read_text())
    assert rel["ota"]["commit"] == commit and rel["ota"]["branch"] == "iq-8275-evk"
    assert rel["ota"]["sha256"] == hashlib.sha256(tarball.read_bytes()).hexdigest()
    assert (result.release_dir / "ostree" / "ostreecommit.tar.xz").read_bytes() == tarball.read_bytes()


def test_sota_build_without_the_commit_tarball_names_the_file(env, tmp_path):
    from provisioner.ota.commit import collect

    with pytest.raises(BuildError) as err:
        do_build(_sota_manifest(tmp_path), tmp_path / "out", ota_collector=partial(collect, env=context.current().env))
    assert "\n" not in err.value.message
    assert "tmp/deploy/images/iq-8275-evk/edge-llm-image-iq-8275-evk.rootfs.ostreecommit.tar.xz" in err.value.message
    assert not (tmp_path / "out" / "rel-7").exists()      # no release without its commit
