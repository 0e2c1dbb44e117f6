"""The one family of expected failures, and the one exit-code rule of every command.

Every mistake a user can make (bad manifest, wrong QAIRT, truncated model, missing board...)
is raised as a :class:`UserError`. Only ``provisioner.cli.main`` turns them into an exit code
and a single line on stderr; library code never calls ``sys.exit`` or prints tracebacks.

Exit codes, the same for every command (scripts and CI jobs branch on them):

* ``EXIT_OK`` 0: done; whatever was checked passed.
* ``EXIT_UNFIT`` 1: the command ran to the end and what it checked is unfit: a manifest or model
  (``check``, ``inspect --board``), a flash bundle (``station preflight``), boards (``station flash``,
  ``fleet verify``/``launch``...), the rehearsal. Raised as :class:`CheckFailed`.
* ``EXIT_BAD_INPUT`` 2: the command could not do its job: bad arguments, a missing or unreadable
  input, a tool that is not installed, a build or download that failed. Any other :class:`UserError`.
* ``EXIT_INTERRUPTED`` 130: Ctrl-C (128 + SIGINT, as shells report it).
* ``EXIT_INTERNAL`` 70: a bug in this tool (``EX_SOFTWARE`` from BSD's sysexits(3)), so that a
  crash is never mistaken for "checked and unfit".
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_UNFIT = 1
EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130


class UserError(Exception):
    """An expected failure: what is wrong, and what to do about it.

    ``str(err)`` is one line, e.g. ``manifest.yaml: models[0].qairt: ... -> pin 2.44.0.260225``.
    """

    exit_code = EXIT_BAD_INPUT

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

    exit_code = EXIT_UNFIT


class ManifestUnfit(ManifestError, CheckFailed):
    """``check`` read the manifest (and its model files) and found problems: exit 1, every problem listed.

    An unreadable manifest stays a plain :class:`ManifestError` (exit 2): nothing could be checked.
    """
