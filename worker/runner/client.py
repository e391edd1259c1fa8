"""The judge's side of the wire: talk to the subject, trust nothing it says, turn it into test outcomes.

Contract:
- ``SubjectClient`` owns one connection to the subject (accepted on ``JOB_DIR/ipc/judge.sock`` or handed
  in as a socket). ``begin()`` starts a fresh learner process for the current test, ``call(path, args,
  kwargs)`` and ``probe(name, args, kwargs)`` return decoded data (``wire.decode``), ``end()`` stops it.
- Every reply is checked against the schema of ``subject.py``. What the learner caused becomes an
  exception the test reports as a failure with a teaching message: ``SubmissionImportError``,
  ``SubjectExited`` (the process ended mid-test), ``LearnerException`` subclasses (re-raised builtin types,
  so ``except ValueError`` in a test works), ``SubjectProtocolError`` (garbage on the wire). A reply that
  does not come before the job's deadline raises ``RunnerTimeout``.
- ``SubmissionProxy`` is what the ``submission`` fixture gives tests: ``submission.f(*args)`` is
  ``call(["f"], args)``; ``submission.Cls.method(...)`` walks the path. Arguments travel by value.
"""

from __future__ import annotations

import builtins
import signal
import socket
import time
import types
from pathlib import Path
from typing import Any

from . import feedback, wire

PROTOCOL_VERSION = 1
REPLY_OVERHEAD = 1024
ACCEPT_WAIT_S = 60.0
END_GRACE_S = 2.0


class RunnerTimeout(BaseException):
    """Raised in the judge when the job's time limit is reached (BaseException: harder to swallow)."""


class SubjectNotStarted(BaseException):
    """The process that runs the learner's code never connected: the platform's failure, never the learner's.

    The subject connects after importing only the preloads and probes, before any learner code runs, so nothing
    a learner wrote can delay it: the run is reported as a platform error, graded again at no cost.
    """


class SubmissionImportError(BaseException):
    """The learner's module could not be imported; the text is the teaching message.

    BaseException, like the two below: a test's ``except Exception`` around a call must not turn it
    into "your function raised SubmissionImportError". ``raised``: the exception's type name, text and the
    learner's line when their top level raised one (``feedback.explain`` then words it), else None.
    """

    def __init__(self, message: str, raised: tuple[str, str, int | None] | None = None) -> None:
        super().__init__(message)
        self.raised = raised

    @property
    def details(self) -> str:
        if self.raised is None:
            return ""
        type_name, message, _ = self.raised
        return feedback.clean_details(f"{type_name}: {message}" if message else type_name)

    def teaching(self) -> str:
        if self.raised is None:
            return str(self)
        type_name, message, line = self.raised
        got = feedback.explain(type_name, message)
        where = f" (line {line})" if line is not None else ""
        if got.cause:
            return f"Your code failed while being imported{where}: {got.message[:1].lower()}{got.message[1:]}"
        text = feedback.first_line(message)
        said = f": {text}" if text else " (with no message)"
        return f"Your code raised {type_name} while being imported{said}{where}"


class SubmissionMissing(BaseException):
    """The learner's module has no attribute the test called (``submission.train`` without a ``train``)."""

    def __init__(self, name: str) -> None:
        shown = name if name.replace(".", "").isidentifier() else "the function the tests call"
        super().__init__(
            f"Your code has no `{shown}`: the tests call it by that name. Define it at the top level of your file, "
            "spelled exactly as the prompt says (not inside another function or an if-block)."
        )


class SubjectExited(BaseException):
    """The learner's process ended while a test was talking to it."""


class SubjectProtocolError(BaseException):
    """The learner's process sent something that is not a valid answer."""


class LearnerException(Exception):
    """An exception raised by the learner's code, carried over as data."""

    type_name = "Exception"
    line: int | None = None

    def teaching(self) -> str:
        text = f"{self.type_name}: {self.args[0]}" if self.args and self.args[0] else self.type_name
        return text + (f" (your code, line {self.line})" if self.line is not None else "")


_CLASSES: dict[str, type[LearnerException]] = {}


def learner_exception(type_name: str, builtin: bool, message: str, line: int | None) -> LearnerException:
    """Build the judge-side exception for a learner's exception; builtin types keep their base class."""
    base = getattr(builtins, type_name, None) if builtin else None
    if not (isinstance(base, type) and issubclass(base, Exception)) or issubclass(base, LearnerException):
        base = None
    key = type_name if base is not None else ""
    cls = _CLASSES.get(key)
    if cls is None:
        bases: tuple[type, ...] = (LearnerException,) if base is None else (base, LearnerException)
        try:
            cls = types.new_class(type_name if base is not None else "LearnerException", bases)
        except TypeError:  # a builtin whose layout cannot be combined
            cls = LearnerException
        _CLASSES[key] = cls
    try:
        exc = cls(message)
    except Exception:
        exc = LearnerException(message)
    exc.type_name = type_name
    exc.line = line
    return exc


def _raised_at_import(reply: dict[str, Any]) -> tuple[str, str, int | None] | None:
    """Return the exception an ``import_error`` reply carries (type, text, line), if it is well formed."""
    type_name, message, line = reply.get("type"), reply.get("raw"), reply.get("line")
    if not (isinstance(type_name, str) and type_name.isidentifier() and isinstance(message, str)):
        return None
    return type_name[:100], message[:4000], line if type(line) is int and line > 0 else None


def _exit_message(reply: dict[str, Any]) -> str:
    if reply.get("status") == "exited":
        return f"Your code exited while the test was running (exit code {reply.get('code')})"
    number = reply.get("signal")
    try:
        name = signal.Signals(number).name if isinstance(number, int) else str(number)
    except ValueError:
        name = f"signal {number}"
    hint = " (often: it used more memory than allowed)" if name == "SIGKILL" else ""
    return f"Your code was killed by {name} while the test was running{hint}"


class SubjectClient:
    """One connection to the subject for a whole test session."""

    def __init__(self, *, deadline: float, max_reply_bytes: int, listener: socket.socket | None = None,
                 sock: socket.socket | None = None, accept_wait_s: float = ACCEPT_WAIT_S) -> None:  # fmt: skip
        self.deadline = deadline
        self.accept_wait_s = accept_wait_s
        self.max_frame = max_reply_bytes + REPLY_OVERHEAD
        self.listener = listener
        self.sock = sock
        self.greeted = False
        self.active = False
        self.import_error: str | None = None
        self.broken: str | None = None

    def _connection(self) -> socket.socket:
        if self.sock is None:
            assert self.listener is not None
            wait_s = min(self.accept_wait_s, self.deadline - time.monotonic())
            self.listener.settimeout(max(0.01, wait_s))
            try:
                self.sock, _ = self.listener.accept()
            except TimeoutError as exc:
                if time.monotonic() < self.deadline:  # our own wait ran out, not the learner's time
                    raise SubjectNotStarted(
                        f"the process that runs your code did not start within {self.accept_wait_s:g} s"
                    ) from exc
                raise RunnerTimeout() from exc
            finally:
                self.listener.close()
        if not self.greeted:
            hello = self._recv()
            if hello.get("status") != "hello" or hello.get("version") != PROTOCOL_VERSION:
                raise SubjectProtocolError("the process running your code did not start properly")
            self.greeted = True
        return self.sock

    def _recv(self, deadline: float | None = None) -> dict[str, Any]:
        assert self.sock is not None
        try:
            return wire.recv_frame(self.sock, max_bytes=self.max_frame, deadline=deadline or self.deadline)
        except wire.WireTimeout as exc:
            raise RunnerTimeout() from exc

    def _exchange(self, request: dict[str, Any], deadline: float | None = None) -> dict[str, Any]:
        if self.broken is not None:
            raise SubjectExited(self.broken)
        sock = self._connection()
        try:
            wire.send_frame(sock, request)
            return self._recv(deadline)
        except wire.WireClosed as exc:
            self.broken = "The process running your code stopped answering, so the remaining tests could not run"
            raise SubjectExited(self.broken) from exc
        except wire.WireError as exc:
            raise SubjectProtocolError(f"Your code sent back something that is not a valid answer: {exc}") from exc

    def close(self) -> None:
        """Close the connection: the subject then stops its child and exits."""
        if self.sock is not None:
            self.sock.close()
        if self.listener is not None:
            self.listener.close()

    def begin(self) -> None:
        """Start a fresh learner process for the current test."""
        self.active = True
        reply = self._exchange({"op": "begin"})
        status = reply.get("status")
        if status == "ready":
            self.import_error = None
            return
        self.active = False
        if status == "import_error" and isinstance(reply.get("message"), str):
            self.import_error = reply["message"][:4000]
            raise SubmissionImportError(self.import_error, _raised_at_import(reply))
        self._fail(reply)

    def end(self) -> None:
        """Stop the current test's learner process, if one runs."""
        if not self.active or self.broken is not None:
            self.active = False
            return
        self.active = False
        # Stopping must work after the deadline too (the test that timed out is being torn down).
        reply = self._exchange({"op": "end"}, deadline=max(self.deadline, time.monotonic()) + END_GRACE_S)
        if reply.get("status") != "ended":
            raise SubjectProtocolError("the process running your code did not stop cleanly")

    def _request(self, request: dict[str, Any]) -> Any:
        if not self.active:
            self.begin()
        reply = self._exchange(request)
        status = reply.get("status")
        if status == "returned" and "value" in reply:
            try:
                return wire.decode(reply["value"], native="loaded")
            except (wire.WireError, RecursionError, ValueError, TypeError) as exc:
                raise SubjectProtocolError(f"Your code sent back a value that cannot be read: {exc}") from exc
        if status == "raised":
            type_name, message, line = reply.get("type"), reply.get("message"), reply.get("line")
            if not (isinstance(type_name, str) and type_name.isidentifier() and isinstance(message, str)):
                raise SubjectProtocolError("Your code sent back a malformed exception")
            if not (line is None or (type(line) is int and line > 0)):
                line = None
            raise learner_exception(type_name[:100], reply.get("builtin") is True, message[:4000], line)
        self._fail(reply)

    def _fail(self, reply: dict[str, Any]) -> Any:
        status = reply.get("status")
        if status in ("exited", "killed"):
            self.active = False
            raise SubjectExited(_exit_message(reply))
        if status == "missing" and isinstance(reply.get("name"), str):
            raise SubmissionMissing(reply["name"][:200])
        if status == "bad_request":
            raise LookupError(str(reply.get("message", "bad request"))[:500])
        raise SubjectProtocolError(f"Your code sent back an unexpected answer ({str(status)[:40]!r})")

    def call(self, path: list[str], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Call ``submission.<path>(*args, **kwargs)`` in the learner's process; return the decoded result."""
        request = {"op": "call", "path": path, "args": wire.encode(list(args)), "kwargs": wire.encode(kwargs)}
        return self._request(request)

    def probe(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run ``probes.<name>(submission, *args, **kwargs)`` in the learner's process; return its data."""
        request = {"op": "probe", "name": name, "args": wire.encode(list(args)), "kwargs": wire.encode(kwargs)}
        return self._request(request)


class RemoteFunction:
    """A function of the learner's module, called by value in the learner's process."""

    def __init__(self, client: SubjectClient, path: list[str]) -> None:
        self._client = client
        self._path = path

    def __getattr__(self, name: str) -> RemoteFunction:
        if name.startswith("__"):
            raise AttributeError(name)
        return RemoteFunction(self._client, [*self._path, name])

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._client.call(self._path, args, kwargs)

    def __repr__(self) -> str:
        return ".".join(self._path)


class SubmissionProxy(types.ModuleType):
    """The ``submission`` module as tests see it: attribute look-ups become remote functions."""

    def __init__(self, name: str, client: SubjectClient) -> None:
        super().__init__(name)
        self._gpulab_client = client

    def __getattr__(self, attr: str) -> RemoteFunction:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return RemoteFunction(self._gpulab_client, [attr])


def listen(path: Path) -> socket.socket:
    """Create the judge's listening socket at ``path`` (mode 0666 so the subject's uid may connect)."""
    if path.exists() or path.is_symlink():
        path.unlink()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    path.chmod(0o666)
    listener.listen(1)
    return listener
