"""Helpers for artifact tests: run the real CLI and capture what a user sees."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from provisioner.cli import main


@dataclass
class CliResult:
    code: int
    out: str
    err: str

    def json(self):
        return json.loads(self.out)

    @property
    def err_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.strip()]


@pytest.fixture
def cli(capsys):
    """Run ``provisioner ARGS`` in-process; returns exit code, stdout and stderr."""

    def run(*args: str) -> CliResult:
        capsys.readouterr()
        code = main([str(a) for a in args])
        cap = capsys.readouterr()
        assert "Traceback" not in cap.err and "Traceback" not in cap.out
        return CliResult(code, cap.out, cap.err)

    return run
