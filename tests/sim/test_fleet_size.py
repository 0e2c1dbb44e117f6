"""A sim root of hundreds of boards: the supervisor's file descriptors and the boot wait scale with it."""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest

from provisioner.sim import control

_HARD = resource.getrlimit(resource.RLIMIT_NOFILE)[1]


@pytest.mark.skipif(_HARD != resource.RLIM_INFINITY and _HARD < 2048, reason="the hard fd limit leaves no room")
def test_supervisor_lifts_a_1024_fd_soft_limit_for_a_256_board_root():
    # the usual login default (soft 1024) runs out near 256 boards, one supervisor holding every console
    code = ("import resource; s, h = resource.getrlimit(resource.RLIMIT_NOFILE); "
            "resource.setrlimit(resource.RLIMIT_NOFILE, (1024, h)); "
            "from provisioner.sim.supervisor import raise_fd_limit; print(raise_fd_limit())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert int(out.stdout) > 4 * 256


def test_the_boot_wait_grows_with_the_fleet():
    assert control.boot_timeout(4) == 120.0                 # small fleets: as before
    assert control.boot_timeout(256) >= 256 * control.BOOT_S_PER_BOARD > 120.0
