"""A sandbox for tests and development only: it runs no code and leaves the result a handler decides.

Contract (what ``httpx.MockTransport`` is to transports, this is to ``base.Sandbox``):
- ``FakeSandbox(handler)`` implements the protocol (no handler: every test passes). ``run(job_dir, limits)``
  reads what the pipeline wrote (``job.json``: the expected tests and their points; ``submission/<module>.py``:
  the code; ``tests/``: the test files) into a ``FakeJob``, calls ``handler(job)`` and leaves what the
  returned ``Reply`` says: ``reply.result`` in ``out/result.json`` (a JSON document, or ``bytes`` written
  verbatim, or ``None``: no file) and the rest as the ``SandboxRun``, with stdout/stderr capped at
  ``limits.output_bytes`` as a backend caps them. The pipeline reads that file back with
  ``jobdir.read_result`` as it reads a real judge's, so a reply that breaks the ``result.json`` schema is
  refused (verdict ``crashed``), never trusted.
- ``job.reply(outcomes, default=..., messages=..., error=...)`` builds a schema-valid reply: every expected
  test reports ``outcomes[id]``, else ``default``. Ready-made: ``FakeSandbox.passing()`` (every test passes),
  ``.failing(*ids)`` (those tests fail, all when none is named), ``.timing_out()`` (the wall clock ran out,
  no result), ``.crashing()`` (the judge was killed before it reported), ``.broken(message)`` (raises
  ``PlatformError``: a failure of ours, which the pipeline records as ``internal_error``).
- A handler that raises raises out of ``run``, as a backend's own failure does.
- ``handler`` may be replaced between runs; ``runs`` lists the ``FakeJob`` of every run so far, in order.
  Runs may happen from many threads at once.
- Never chosen by settings: ``get_sandbox`` does not know it. Tests inject it (``tests/conftest.py``'s
  ``fake_sandbox`` fixture); a real backend is tested with its own tests.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from worker.bank.spec import ExpectedTest, Limits
from worker.core.errors import PlatformError
from worker.grading.sandbox.base import SandboxRun
from worker.runner import RESULT_VERSION  # the fake stands in for the judge: it writes the judge's format


@dataclass(frozen=True)
class Reply:
    """What a fake run leaves: ``result`` for ``out/result.json`` (``None``: no file) and how the run ended."""

    result: object = None
    exit_code: int | None = 0
    timed_out: bool = False
    memory_exceeded: bool = False
    output_exceeded: bool = False
    stdout: bytes = b""
    stderr: bytes = b""


@dataclass(frozen=True)
class FakeJob:
    """One run as the fake saw it: the learner's code and what the job directory asked for."""

    code: str
    tests: tuple[ExpectedTest, ...]
    test_files: Mapping[str, str]
    limits: Limits

    def reply(
        self,
        outcomes: Mapping[str, str] | None = None,
        *,
        default: str = "passed",
        messages: Mapping[str, str] | None = None,
        error: str | None = None,
        stdout: bytes = b"",
        stderr: bytes = b"",
    ) -> Reply:
        """Return a schema-valid reply where each expected test reports ``outcomes[id]`` or ``default``."""
        outcomes, messages = outcomes or {}, messages or {}
        tests = []
        for test in self.tests:
            outcome = outcomes.get(test.id, default)
            message = messages.get(test.id, "" if outcome == "passed" else f"{test.id} {outcome} (fake sandbox)")
            tests.append({"id": test.id, "outcome": outcome, "message": message, "duration_ms": 0})
        result = {"version": RESULT_VERSION, "tests": tests, "error": error}
        return Reply(result=result, stdout=stdout, stderr=stderr)


Handler = Callable[[FakeJob], Reply]


def _read_job(job_dir: Path, limits: Limits) -> FakeJob:
    """Read what the pipeline wrote into ``job_dir``; a job directory it cannot read is our failure."""
    try:
        job = json.loads((job_dir / "job.json").read_text(encoding="utf-8"))
        code = (job_dir / "submission" / f"{job['module']}.py").read_text(encoding="utf-8")
        tests = tuple(ExpectedTest(t["id"], float(t["points"])) for t in job["tests"])
        tests_dir = job_dir / "tests"
        files = {
            path.relative_to(tests_dir).as_posix(): path.read_text(encoding="utf-8")
            for path in sorted(tests_dir.rglob("*"))
            if path.is_file() and "__pycache__" not in path.relative_to(tests_dir).parts  # the host's bytecode
        }
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise PlatformError(f"fake sandbox: cannot read the job directory: {type(exc).__name__}: {exc}") from exc
    return FakeJob(code=code, tests=tests, test_files=files, limits=limits)


def _write_result(out_dir: Path, result: object) -> None:
    if result is None:
        return
    data = result if isinstance(result, bytes) else json.dumps(result).encode("utf-8")
    (out_dir / "result.json").write_bytes(data)


def _cap(data: bytes, limit: int) -> tuple[bytes, bool]:
    return (data[:limit], True) if len(data) > limit else (data, False)


def _pass_all(job: FakeJob) -> Reply:
    return job.reply()


class FakeSandbox:
    """Run nothing; leave what ``handler`` says (for tests and development only, see the module docstring)."""

    name = "fake"
    # Nothing of the learner's runs, so nothing can get out: results are labelled like an isolated backend's.
    isolated = True

    def __init__(self, handler: Handler = _pass_all) -> None:
        self.handler = handler
        self._runs: list[FakeJob] = []
        self._lock = threading.Lock()

    @classmethod
    def passing(cls) -> FakeSandbox:
        """Return a fake where every expected test passes."""
        return cls(_pass_all)

    @classmethod
    def failing(cls, *test_ids: str, message: str = "") -> FakeSandbox:
        """Return a fake where the tests ``test_ids`` (every test when none is given) fail, the others pass."""

        def fail(job: FakeJob) -> Reply:
            failed = test_ids or tuple(t.id for t in job.tests)
            return job.reply(
                {test_id: "failed" for test_id in failed},
                messages={test_id: message for test_id in failed} if message else None,
            )

        return cls(fail)

    @classmethod
    def timing_out(cls) -> FakeSandbox:
        """Return a fake whose runs hit the wall clock: killed, no result."""
        return cls(lambda job: Reply(exit_code=-9, timed_out=True))

    @classmethod
    def crashing(cls, exit_code: int = -9) -> FakeSandbox:
        """Return a fake whose judge ends with ``exit_code`` before it writes any result."""
        return cls(lambda job: Reply(exit_code=exit_code))

    @classmethod
    def broken(cls, message: str = "fake sandbox is broken") -> FakeSandbox:
        """Return a fake that fails as the platform does: every run raises ``PlatformError(message)``."""

        def fail(job: FakeJob) -> Reply:
            raise PlatformError(message)

        return cls(fail)

    @property
    def runs(self) -> tuple[FakeJob, ...]:
        """Return the jobs of every run so far, in the order they started."""
        with self._lock:
            return tuple(self._runs)

    def check(self) -> None:
        """Nothing to check: the fake runs anywhere."""

    def run(self, job_dir: Path, limits: Limits) -> SandboxRun:
        """Read the job, ask the handler and leave its reply in ``job_dir/out`` and the returned run."""
        started = time.monotonic()
        job = _read_job(job_dir, limits)
        with self._lock:
            self._runs.append(job)
            handler = self.handler
        reply = handler(job)  # outside the lock: a slow handler must not serialise concurrent runs
        _write_result(job_dir / "out", reply.result)
        stdout, out_cut = _cap(reply.stdout, limits.output_bytes)
        stderr, err_cut = _cap(reply.stderr, limits.output_bytes)
        return SandboxRun(
            exit_code=reply.exit_code,
            timed_out=reply.timed_out,
            memory_exceeded=reply.memory_exceeded,
            output_exceeded=reply.output_exceeded,
            stdout=stdout,
            stderr=stderr,
            output_truncated=out_cut or err_cut,
            wall_s=time.monotonic() - started,
        )
