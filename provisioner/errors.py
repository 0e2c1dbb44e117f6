"""The one family of expected failures.

Every mistake a user can make (bad manifest, wrong QAIRT, truncated model, missing board...)
is raised as a :class:`UserError`. Only ``provisioner.cli.main`` turns them into an exit code
and a single line on stderr; library code never calls ``sys.exit`` or prints tracebacks.
"""

from __future__ import annotations


class UserError(Exception):
    """An expected failure: what is wrong, and what to do about it.

    ``str(err)`` is one line, e.g. ``manifest.yaml: models[0].qairt: ... -> pin 2.44.0.260225``.
    """

    exit_code = 2

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message} -> {self.hint}"
        return self.message


class ManifestError(UserError):
    """The release manifest is missing, unreadable or invalid.

    ``problems`` holds every problem found (location, message, fix) so they can all be shown
    at once instead of one per run.
    """

    def __init__(self, message: str, hint: str | None = None, problems: list | None = None) -> None:
        super().__init__(message, hint)
        self.problems = list(problems or [])


class ArtifactError(UserError):
    """A model, bundle or download is unusable (truncated, wrong checksum, wrong board...)."""


class FetchError(ArtifactError):
    """A download failed (404, timeout, checksum mismatch)."""


class RenderError(UserError):
    """The kas configuration cannot be generated for this manifest and release."""


class BuildError(UserError):
    """The container build could not start or a bitbake task failed."""


class StationError(UserError):
    """Factory-station failure: bundle preflight, qdl, EDL devices, consoles, records."""


class FleetError(UserError):
    """Fleet operation failure: inventory, ansible, unreachable or failing boards."""


class SimError(UserError):
    """Virtual-board (simulator) failure."""


class CheckFailed(UserError):
    """A check ran and found the subject unfit (e.g. a model that cannot run on a board).

    Exit code 1 distinguishes "checked and failed" from "could not check" (2).
    """

    exit_code = 1
