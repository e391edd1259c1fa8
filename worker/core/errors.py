"""Every error gpulab raises on purpose, shared by the web side and the grading side.

Contract: services, the grading pipeline and the sandbox raise these with a ``message`` a person can act on.
They carry no HTTP status: the web side maps each class to one (``app.web.errors``), the CLI to an exit code.
This module imports nothing of ours.
"""

from __future__ import annotations


class GpulabError(Exception):
    """Base class: ``message`` is the sentence a person reads."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFound(GpulabError):
    """The thing asked for does not exist, or the asker may not know that it does."""


class Forbidden(GpulabError):
    """The asker is known but may not do this."""


class PasswordChangeRequired(Forbidden):
    """The account still has a one-time password someone else handed over: its owner must choose their own first."""


class Unauthorized(GpulabError):
    """Nobody is logged in, or the credentials are wrong."""


class RateLimited(GpulabError):
    """Too many tries; ``retry_after_s`` says when the next one may succeed."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class RunnerUnavailable(GpulabError):
    """No worker answered a job the request waits on (an example run) in time; nothing was stored."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class PayloadTooLarge(GpulabError):
    """The input is larger than its limit."""


class Conflict(GpulabError):
    """The request clashes with what is stored (a duplicate e-mail, a stale version)."""


class InvalidInput(GpulabError):
    """The input is malformed or breaks a rule it must follow."""


class ExerciseFormatError(GpulabError):
    """An exercise folder or upload does not follow ``exercises/README.md``."""

    def __init__(self, slug: str, problem: str) -> None:
        super().__init__(f"exercise {slug!r}: {problem}")
        self.slug = slug
        self.problem = problem


class PathFormatError(ExerciseFormatError):
    """The bank's learning path (``path.toml``) does not follow ``exercises/README.md``; ``problem`` names the field."""

    def __init__(self, problem: str) -> None:
        super().__init__("path.toml", problem)
        self.message = problem
        self.args = (problem,)


class ConfigError(GpulabError):
    """Settings are unsafe or inconsistent; raised at start-up, never per request."""


class SandboxUnavailable(GpulabError):
    """The chosen sandbox backend cannot run on this host (missing bwrap, cgroups, user namespaces...)."""


class HostUnfit(SandboxUnavailable):
    """This grading host cannot grade the job (its GPU failed): the job goes back to the queue for another host."""


class PlatformError(GpulabError):
    """Grading failed for a reason that is ours, not the learner's; the only kind that is retried."""
