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
