"""Named steps: a failure stops the job, cleanups always run (in reverse), Ctrl-C included."""

import pytest

from provisioner.errors import UserError
from provisioner.steps import Step, StepRunner


def test_failure_stops_and_cleanups_run_in_reverse():
    log = []

    def fail():
        raise UserError("board 2 did not enter EDL", "check its console cable")

    steps = [
        Step("a", lambda: log.append("a") or "done a", cleanup=lambda: log.append("clean a")),
        Step("b", fail, cleanup=lambda: log.append("clean b")),
        Step("c", lambda: log.append("c")),
    ]
    runner = StepRunner()
    results = runner.run(steps)
    assert [r.name for r in results] == ["a", "b"]
    assert not runner.ok and "EDL" in results[1].detail
    assert log == ["a", "clean b", "clean a"]


def test_interrupt_still_cleans_up():
    log = []

    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        StepRunner().run([Step("up", lambda: None, cleanup=lambda: log.append("down")), Step("x", interrupted)])
    assert log == ["down"]


def test_skip_by_name():
    ran = []
    results = StepRunner(skip={"b"}).run([Step("a", lambda: ran.append("a")), Step("b", lambda: ran.append("b"))])
    assert ran == ["a"] and results[1].skipped


def test_runner_and_board_steps_speak_one_event_type():
    """The rehearsal's progress lines and the station's records read the same StepEvent: start, then
    stop with the duration and result line, or error with the duration and the one-line message."""
    from provisioner.station import progress, strategy
    from provisioner.steps import StepEvent

    events: list[StepEvent] = []

    def fail():
        raise UserError("qdl is missing", "install qdl")

    runner = StepRunner(on_event=events.append)
    runner.run([Step("render", lambda: "kas config written"), Step("flash", fail)])
    seen = [(e.step, e.kind) for e in events]
    assert seen == [("render", "start"), ("render", "stop"), ("flash", "start"), ("flash", "error")]
    assert events[1].detail == {"result": "kas config written"} and events[1].duration_s is not None
    assert events[3].detail == {"error": "qdl is missing -> install qdl"} and events[3].duration_s is not None
    assert runner.error is not None and runner.error.message == "qdl is missing" and runner.error.hint == "install qdl"
    assert strategy.StepEvent is StepEvent and progress.StepEvent is StepEvent


def test_timed_reports_the_error_then_raises():
    from provisioner.steps import timed

    events = []

    def fail():
        raise UserError("board 1 did not enter EDL")

    with pytest.raises(UserError):
        timed("edl", fail, events.append, serial="0AA94EFD")
    assert [(e.serial, e.step, e.kind) for e in events] == [("0AA94EFD", "edl", "start"), ("0AA94EFD", "edl", "error")]
    assert events[1].as_dict()["detail"] == {"error": "board 1 did not enter EDL"}
