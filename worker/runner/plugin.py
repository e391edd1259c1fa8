"""The judge's pytest run: hidden tests that reach the learner's code only through the subject.

Contract:
- ``run_tests(job, client)`` returns ``(tests, error, timed_out, measurements, platform_error)``: ``tests`` is the
  ``result.json`` test list (ids relative to the tests folder, parametrized ids folded into their base id;
  a failed test that earned partial credit through ``measure.grade`` carries ``credit``), ``error`` a
  collection/setup problem or ``None``, ``timed_out`` whether the inner time limit fired, ``measurements``
  what the tests recorded with the ``measure`` fixture (``runner.measure``), ``platform_error`` why the run says
  nothing about the learner's code (its process never started: ``client.SubjectNotStarted``) or ``None``.
- Tests reach the learner's code through the ``submission`` fixture (or ``import submission``), a
  ``SubmissionProxy`` whose calls run in the subject, and the ``probe`` fixture: ``probe("name", *args)``
  runs ``probes.name(submission_module, *args)`` there. Both return data only. Each test gets a fresh
  learner process on its first call, stopped after the test (with ``learner_process = "per-file"`` in
  ``job.json``, after the last test of its file; one that died is replaced at the next call).
- The learner's module is never imported here; ``sys.path`` holds the tests and ``probes/`` only.
- Messages are the teaching part of a failure (assertion text, ``ExcType: message``), never a traceback.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import time
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from . import feedback
from .client import (
    LearnerException,
    RunnerTimeout,
    SubjectClient,
    SubjectExited,
    SubjectNotStarted,
    SubjectProtocolError,
    SubmissionImportError,
    SubmissionMissing,
    SubmissionProxy,
)
from .measure import Recorder

MAX_MESSAGE = 2000
FUNCTION_REPR = re.compile(r"<(?:function|bound method|built-in function) ([\w.]+) at 0x[0-9a-f]+>")
RETRIGGER_S = 0.5
# The alarm backs up the client's per-call deadline (same instant) for time spent in the tests themselves.
ALARM_GRACE_S = 0.5
LEARNER_PROCESS_MODES = ("per-test", "per-file")


@dataclass
class Job:
    job_dir: Path
    timeout_s: float
    module: str
    expected: list[str] = field(default_factory=list)

    max_reply_bytes: int = 4 * 1024 * 1024
    learner_process: str = "per-test"
    params: dict[str, int | float | str] = field(default_factory=dict)
    accept_wait_s: float = 60.0  # how long the judge waits for the learner's process to connect (the host's choice)

    @property
    def probes_dir(self) -> Path:
        return self.job_dir / "probes"

    @property
    def tests_dir(self) -> Path:
        return self.job_dir / "tests"


def _trim(text: str) -> str:
    text = text.strip()
    if len(text) <= MAX_MESSAGE:
        return text
    cut = text[: MAX_MESSAGE - 15]
    cut = cut[: cut.rfind(" ")] if " " in cut[-80:] else cut  # end on a whole word when one ends nearby
    return cut.rstrip() + "\n... (trimmed)"


def _author_message(exc: AssertionError) -> str:
    """Return the test author's message of a failed ``assert``, without pytest's introspection of it.

    pytest rewrites ``assert x == y, "msg"`` to raise ``msg`` followed by ``assert <x's repr> == <y's repr>`` and
    ``where`` lines: those show the test's internals ("assert False", "assert not [0, 2]"), never a cause.
    """
    lines: list[str] = []
    for line in str(exc).splitlines():
        if line.startswith("assert ") or line.lstrip().startswith(("+  where ", "where ", "+ ", "- ", "? ")):
            break
        lines.append(FUNCTION_REPR.sub(r"\1", line))
    return "\n".join(lines).strip()


def _unexplained(test_doc: str | None) -> str:
    """The message of a check whose author wrote none: what the test checks, from its docstring when it has one."""
    summary = (test_doc or "").strip().split("\n\n", 1)[0]
    summary = " ".join(summary.split()).rstrip(".")
    if summary:
        return f"This check failed: {summary[:1].lower()}{summary[1:]}."
    return "This check failed, and the exercise gives no explanation for it (please report it to your instructor)."


def describe(exc: BaseException, test_doc: str | None = None) -> tuple[str, str]:
    """Return what a learner reads of an exception raised by a test or carried over from them, and its details.

    Learner exceptions are explained by ``feedback.explain`` (a known framework failure gets its sentence, the
    framework's own text goes to the details); an exception of the test's own code (a check that could not read
    what the learner's code returned) is said as such, never as the learner's.
    """
    if isinstance(exc, SubmissionImportError):
        return _trim(exc.teaching()), exc.details
    if isinstance(exc, SubjectExited | SubjectProtocolError | SubmissionMissing):
        return _trim(str(exc)), ""
    if isinstance(exc, LearnerException):
        got = feedback.explain(exc.type_name, str(exc.args[0]) if exc.args else "")
        if exc.line is None:
            return _trim(got.message), got.details
        body, stop = (got.message[:-1], ".") if got.message.endswith(".") else (got.message, "")
        return _trim(f"{body} (your code, line {exc.line}){stop}"), got.details
    if isinstance(exc, feedback.Failed):
        return _trim(str(exc) or _unexplained(test_doc)), exc.details
    if isinstance(exc, pytest.fail.Exception):
        return _trim(str(exc) or _unexplained(test_doc)), ""
    if isinstance(exc, AssertionError):
        return _trim(_author_message(exc) or _unexplained(test_doc)), ""
    raw = feedback.clean_details(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
    return (
        "This check could not run to the end: it raised an error (see details). Either your code returned something "
        "of another kind or shape than the prompt asks for, or the check itself has a bug (tell your instructor).",
        raw,
    )


LEARNER_CAUSED = (
    SubmissionImportError,
    SubmissionMissing,
    SubjectExited,
    SubjectProtocolError,
    LearnerException,
    RunnerTimeout,
)


def _base_id(nodeid: str) -> str:
    """Fold ``test_x.py::test_f[1]`` into ``test_x.py::test_f``."""
    head, sep, last = nodeid.rpartition("::")
    return f"{head}{sep}{last.split('[', 1)[0]}"


@dataclass
class _Record:
    outcome: str = "passed"
    message: str = ""
    details: str = ""
    duration_s: float = 0.0


class GradingPlugin:
    """Pytest plugin: provides the ``submission`` fixture and collects per-test outcomes."""

    def __init__(self, job: Job, client: SubjectClient) -> None:
        self.job = job
        self.client = client
        self.proxy = SubmissionProxy(job.module, client)
        self.timed_out = False
        self.platform_error: str | None = None  # the learner's process never started (client.SubjectNotStarted)
        self.records: dict[str, _Record] = {}
        self.param_records: dict[str, list[tuple[str, _Record]]] = {}
        self.collect_errors: list[tuple[str, str, bool]] = []
        self.measurements: list[dict[str, Any]] = []
        self.credits: dict[str, float] = {}

    @pytest.fixture(name="submission")
    def submission_fixture(self) -> types.ModuleType:
        """Give the test the learner's module as a proxy: calls run in the learner's process."""
        return self.proxy

    @pytest.fixture(name="probe")
    def probe_fixture(self) -> Any:
        """Give the test ``probe(name, *args, **kwargs)``: run an exercise probe next to the learner's code."""
        return self.probe

    @pytest.fixture(name="measure")
    def measure_fixture(self, request: pytest.FixtureRequest) -> Recorder:
        """Give the test a ``runner.measure.Recorder``: measurements and partial credit for this test."""
        return Recorder(self.measurements, self.credits, _base_id(request.node.nodeid))

    @pytest.fixture(name="params")
    def params_fixture(self) -> dict[str, int | float | str]:
        """Give the test the learner's variant: the values their prompt showed (a copy it may change)."""
        return dict(self.job.params)

    def probe(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Run ``probes.<name>(submission, *args, **kwargs)`` in the learner's process; return its data."""
        return self.client.probe(name, args, kwargs)

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: pytest.Item | None) -> None:
        # The next test must start from a fresh process: nothing of this one may leak into it. With
        # ``per-file`` the exercise lets the tests of one file share it (a process that died is replaced).
        if self.job.learner_process == "per-file" and nextitem is not None and nextitem.path == item.path:
            return
        # A learner process that will not stop is the next test's failure, not this one's.
        with contextlib.suppress(Exception, RunnerTimeout, SubjectExited, SubjectProtocolError):
            self.client.end()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        report = yield
        if call.excinfo is not None:
            exc = call.excinfo.value
            if isinstance(exc, RunnerTimeout):
                # The client's own deadline may fire before the alarm does: either way the run is over.
                self.timed_out = True
                item.session.shouldstop = "time limit reached"
                report.gpulab_message = f"Time limit of {self.job.timeout_s:g} s reached while this test was running"
            elif isinstance(exc, SubjectNotStarted):
                self.platform_error = self.platform_error or f"Not graded: {exc} (the grader, not your code)"
                item.session.shouldstop = "the learner's process did not start"
                report.gpulab_message = self.platform_error
            else:
                test = getattr(item, "obj", None)
                doc = test.__doc__ if callable(test) else None
                report.gpulab_message, report.gpulab_details = describe(exc, doc)
            report.gpulab_learner = isinstance(exc, LEARNER_CAUSED)
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        record = self.param_records.setdefault(_base_id(report.nodeid), [])
        current = next((r for nid, r in record if nid == report.nodeid), None)
        if current is None:
            current = _Record()
            record.append((report.nodeid, current))
        current.duration_s += report.duration
        if current.outcome != "passed":
            return
        message = getattr(report, "gpulab_message", "")
        if report.skipped:
            current.outcome = "skipped"
            current.message = _skip_reason(report)
        elif report.failed:
            learner_caused = getattr(report, "gpulab_learner", False)
            current.outcome = "failed" if report.when == "call" or learner_caused else "error"
            current.message = message or "The test failed"
            current.details = getattr(report, "gpulab_details", "")

    def pytest_exception_interact(self, node: pytest.Item | pytest.Collector, call: pytest.CallInfo[Any]) -> None:
        if not isinstance(node, pytest.Collector) or call.excinfo is None:
            return
        exc: BaseException = call.excinfo.value
        if isinstance(exc, pytest.Collector.CollectError) and exc.__cause__ is not None:
            exc = exc.__cause__
        if isinstance(exc, RunnerTimeout):
            self.timed_out = True
        if isinstance(exc, SubjectNotStarted):
            self.platform_error = self.platform_error or f"Not graded: {exc} (the grader, not your code)"
        learner_caused = isinstance(exc, LEARNER_CAUSED)
        message, _ = describe(exc)
        self.collect_errors.append((node.nodeid, message, learner_caused))

    def results(self) -> tuple[list[dict[str, Any]], str | None]:
        """Fold the records into the ``result.json`` test list and the collection error, if any."""
        tests: list[dict[str, Any]] = []
        for base, params in self.param_records.items():
            folded = _fold(base, params)
            share = self.credits.get(base)
            if folded["outcome"] == "failed" and share is not None and 0 < share < 1:
                # Rounded into the open interval the host accepts: a miss by a hair (64 bytes over a budget of
                # millions) must stay a partial credit, not round to 1.0 and void the whole result.
                folded["credit"] = min(max(round(share, 4), 0.0001), 0.9999)
            tests.append(folded)
        reported = {t["id"] for t in tests}
        errors: list[str] = []
        for prefix, message, learner_caused in self.collect_errors:
            if not learner_caused:
                errors.append(f"{prefix or 'tests'}: {message}")
            text = message if learner_caused else f"The tests in {prefix} could not be loaded: {message}"
            for test_id in self.job.expected:
                if test_id not in reported and (not prefix or test_id == prefix or test_id.startswith(prefix + "::")):
                    outcome = "failed" if learner_caused else "error"
                    tests.append({"id": test_id, "outcome": outcome, "message": _trim(text), "duration_ms": 0})
                    reported.add(test_id)
        if self.timed_out:
            for test_id in self.job.expected:
                if test_id not in reported:
                    message = "Not run: the time limit was reached before this test started"
                    tests.append({"id": test_id, "outcome": "failed", "message": message, "duration_ms": 0})
        return tests, _trim("\n".join(errors)) if errors else None


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return getattr(report, "wasxfail", "") or "skipped"


def _fold(base: str, params: list[tuple[str, _Record]]) -> dict[str, Any]:
    """Fold one test's parametrized cases: failed if any failed, skipped only if all skipped."""
    duration_ms = int(sum(r.duration_s for _, r in params) * 1000)
    for outcome in ("failed", "error"):
        bad = [(nodeid, r) for nodeid, r in params if r.outcome == outcome]
        if bad:
            nodeid, record = bad[0]
            case = nodeid[len(base) :] if len(params) > 1 or nodeid != base else ""
            message = f"{case} {record.message}".strip() if case else record.message
            folded = {"id": base, "outcome": outcome, "message": _trim(message), "duration_ms": duration_ms}
            if record.details:
                folded["details"] = record.details
            return folded
    if all(r.outcome == "skipped" for _, r in params):
        return {"id": base, "outcome": "skipped", "message": params[0][1].message, "duration_ms": duration_ms}
    return {"id": base, "outcome": "passed", "message": "", "duration_ms": duration_ms}


def _scrub_environment(job: Job) -> None:
    """Ignore ``PYTEST_*`` settings and plugins; make ``probes/`` importable and ``submission`` the proxy."""
    for key in [k for k in os.environ if k.startswith("PYTEST_")]:
        del os.environ[key]
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    cwd = os.getcwd()
    sys.path[:] = [p for p in sys.path if p not in ("", ".", cwd)]
    if job.probes_dir.is_dir():
        sys.path.insert(0, str(job.probes_dir))
    sys.dont_write_bytecode = True


class _Timer:
    """Raise ``RunnerTimeout`` in the main thread at the deadline, then again every 0.5 s until stopped."""

    def __init__(self, plugin: GradingPlugin, timeout_s: float) -> None:
        self.plugin = plugin
        self.timeout_s = timeout_s
        self.stopped = False

    def _fire(self, signum: int, frame: types.FrameType | None) -> None:
        # Once the client's deadline has stopped the run, raising again would land in pytest's own code.
        if self.stopped or self.plugin.timed_out:
            return
        self.plugin.timed_out = True
        raise RunnerTimeout()

    def start(self) -> None:
        signal.signal(signal.SIGALRM, self._fire)
        signal.setitimer(signal.ITIMER_REAL, self.timeout_s + ALARM_GRACE_S, RETRIGGER_S)

    def stop(self) -> None:
        self.stopped = True
        signal.setitimer(signal.ITIMER_REAL, 0)


# pytest's plugins a judge never uses: output, caches, debuggers, and collectors of other kinds of file (hidden tests
# are test_*.py). Left out, they cost nothing to register or scan for fixtures; ``runner.warm`` skips importing them.
BLOCKED_PLUGINS = ("cacheprovider", "terminal", "stepwise", "pastebin", "debugging", "doctest", "junitxml",
                   "setuponly", "setupplan")  # fmt: skip


def pytest_args(job: Job) -> list[str]:
    """Return pytest's arguments: no config files, cache, terminal output or plugins outside the tests."""
    tests_dir = str(job.tests_dir)
    blocked = [arg for name in BLOCKED_PLUGINS for arg in ("-p", f"no:{name}")]
    return [
        tests_dir,
        "-s",
        *blocked,
        "-c", os.devnull,
        "--rootdir", tests_dir,
        "--confcutdir", tests_dir,
        "-o", "python_files=test_*.py",
        "--continue-on-collection-errors",
    ]  # fmt: skip


def run_tests(
    job: Job, client: SubjectClient
) -> tuple[list[dict[str, Any]], str | None, bool, list[dict[str, Any]], str | None]:
    """Run the job's tests; return the tests, the collection error, whether time ran out, measurements, a platform
    error."""
    _scrub_environment(job)
    plugin = GradingPlugin(job, client)
    sys.modules[job.module] = plugin.proxy
    timer = _Timer(plugin, job.timeout_s)
    started = time.monotonic()
    timer.start()
    error: str | None = None
    try:
        exit_code = pytest.main(pytest_args(job), plugins=[plugin])
        if exit_code in (pytest.ExitCode.INTERNAL_ERROR, pytest.ExitCode.USAGE_ERROR) and not plugin.timed_out:
            error = f"pytest could not run the tests (exit code {int(exit_code)})"
    except RunnerTimeout:
        plugin.timed_out = True
    except BaseException as exc:  # a test may raise anything through pytest; report, don't die
        error = _trim(f"The test run stopped early: {type(exc).__name__}: {exc}")
    finally:
        timer.stop()
    if not plugin.timed_out and time.monotonic() - started > job.timeout_s:
        plugin.timed_out = True
    tests, collect_error = plugin.results()
    return tests, error or collect_error, plugin.timed_out, plugin.measurements, plugin.platform_error
