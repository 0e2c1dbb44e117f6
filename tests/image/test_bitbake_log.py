"""The bitbake output parser over recorded logs (what the progress display and release.json show)."""

from __future__ import annotations

from pathlib import Path

from provisioner.image.bitbake_log import BitbakeProgress, parse_log

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "bitbake"


def test_success_log_progress_and_sstate_summary():
    with open(FIX / "success.log") as f:
        p = parse_log(f)
    assert (p.setscene, p.setscene_total) == (2000, 2000)
    assert (p.task, p.task_total) == (3452, 3452) and p.fraction == 1.0
    assert p.sstate is not None and p.sstate.as_dict() == {
        "wanted": 2163, "local": 1700, "mirrors": 300, "missed": 163, "current": 1289,
        "match_pct": 92, "complete_pct": 97}
    assert p.sstate.line().startswith("Sstate summary: Wanted 2163 Local 1700")
    assert p.failures == [] and p.current == {}
    assert p.tasks_attempted == 3452 and p.tasks_failed == 0
    assert p.config["BB_VERSION"] == "2.18.0" and p.config["MACHINE"] == "iq-8275-evk"
    assert p.layer_commits() == {"meta": "06dd66e6220e5ce4ed4b9af4d8231ae5f0a8ce80",
                                 "meta-qcom": "ef0004df267743cc89d6a09bc724bc99ff541c01",
                                 "meta-edge-llm": "0123456789abcdef0123456789abcdef01234567"}


def test_failure_log_names_task_exit_code_and_logfile():
    with open(FIX / "failure.log") as f:
        p = parse_log(f)
    [fail] = p.failures
    assert fail.task == "linux-qcom_6.18.bb:do_compile" and fail.exit_code == "1"
    assert fail.logfile == "/build/tmp/work/iq_8275_evk-qcom-linux/linux-qcom/6.18/temp/log.do_compile.48213"
    assert any("qcom_scm_pas_shutdown_retry" in ln for ln in fail.context)
    assert p.tasks_failed == 1 and p.sstate.match_pct == 0
    assert any(e.startswith("Logfile of failure") for e in p.errors)


def test_live_status_tracks_running_tasks_and_setscene():
    p = BitbakeProgress()
    assert p.status().startswith("starting")
    ev = p.feed("NOTE: Running setscene task 118 of 3450 (/work/oe-core/meta/recipes-core/zlib/zlib_1.3.1.bb:"
                "do_populate_sysroot_setscene)")
    assert ev.kind == "setscene" and p.fraction == 118 / 3450
    p.feed("NOTE: Running task 10 of 200 (/work/meta-qcom/recipes-kernel/linux/linux-qcom_6.18.bb:do_compile)")
    assert p.feed("NOTE: recipe linux-qcom-6.18-r0: task do_compile: Started").kind == "started"
    p.feed("NOTE: recipe gcc-15.2.0-r0: task do_configure: Started")
    assert "task 10/200 (5%)" in p.status() and "linux-qcom-6.18-r0:do_compile" in p.status()
    assert p.feed("NOTE: recipe linux-qcom-6.18-r0: task do_compile: Succeeded").kind == "finished"
    assert list(p.current) == ["gcc-15.2.0-r0:do_configure"]
    assert p.feed("|   CC      drivers/foo.o") is None      # compiler noise costs nothing
    # the summary may also come as a NOTE (older oe-core)
    p.feed("NOTE: Sstate summary: Wanted 10 Local 5 Mirrors 0 Missed 5 Current 0 (50% match, 50% complete)")
    assert p.sstate.match_pct == 50
