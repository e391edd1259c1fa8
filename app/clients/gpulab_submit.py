#!/usr/bin/env python3
"""gpulab-submit: submit a .py file or a Jupyter notebook to a gpulab server and follow its grading live.

    python3 gpulab-submit.py SLUG FILE.py|NOTEBOOK.ipynb [--server URL] [--token TOKEN] [--assignment ID]

The token is a personal access token with the ``submit`` and ``read`` scopes (made on the server's account
page); without ``--token`` it is read from ``GPULAB_TOKEN``. The server is ``--server``, else ``GPULAB_SERVER``,
else ``DEFAULT_SERVER``: the server that served this file writes its own public address there. A notebook is sent
whole: the server grades the code of its cells tagged ``solution``. The status is printed as it changes
(queued, running), then every test with its outcome and feedback, then the verdict and the score.
Exit status, as ``gpulab grade``: 0 passed, 1 graded but not passed, 2 not graded (refused, an error of ours,
the server unreachable, or no verdict within ``--wait-s``).

One file, the standard library only (Python 3.9+), so it runs anywhere a notebook or a training job does: no
torch, TensorFlow or HTTP package needed. Kept by hand for that reason; the server serves it at
``/cli/gpulab-submit.py``. Live status comes from ``GET /api/submissions/{id}/events`` (Server-Sent Events),
reconnected if the stream ends early, with one plain ``GET`` of the result as the fallback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import IO, Any

EXIT_PASSED, EXIT_NOT_PASSED, EXIT_CANNOT_GRADE = 0, 1, 2
SETTLED = ("graded", "error")
STEPS = {
    "queued": "queued: waiting for a grader",
    "running": "running: your code is being tested",
    "graded": "graded:",
    "error": "error: it could not be graded",
}
USER_AGENT = "gpulab-submit/1"


class Refused(Exception):
    """The server refused the call, or could not be reached; the message says why."""


def _request(
    server: str,
    token: str,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    accept: str = "application/json",
    timeout_s: float = 60.0,
) -> Any:
    """Open ``path`` on ``server`` as the token's owner; return the response, or raise ``Refused``."""
    data = json.dumps(body).encode("utf-8") if body is not None else None
    # The scheme is http(s): main() refuses any other server address.
    request = urllib.request.Request(server.rstrip("/") + path, data=data, method=method)  # noqa: S310
    request.add_header("Authorization", "Bearer " + token)
    request.add_header("Accept", accept)
    request.add_header("User-Agent", USER_AGENT)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        return urllib.request.urlopen(request, timeout=timeout_s)  # noqa: S310  (the URL is the user's server)
    except urllib.error.HTTPError as exc:
        raise Refused(_problem_text(exc)) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise Refused(f"cannot reach {server}: {reason}") from None


def _problem_text(exc: urllib.error.HTTPError) -> str:
    """Return the sentence of a problem-details answer (RFC 9457), or the HTTP status."""
    try:
        problem = json.loads(exc.read().decode("utf-8", "replace"))
        detail = problem.get("detail") if isinstance(problem, dict) else None
    except ValueError:
        detail = None
    text = detail if isinstance(detail, str) and detail else exc.reason
    return f"{text} (HTTP {exc.code})"


def _json(response: Any) -> Any:
    try:
        with response:
            body = response.read()
    except OSError as exc:
        raise Refused(f"the connection was lost: {exc}") from None
    return json.loads(body.decode("utf-8"))


def submit(server: str, token: str, slug: str, path: str, text: str, assignment: int | None = None) -> str:
    """Send ``text``, the file at ``path``, for exercise ``slug``; return the submission id."""
    quoted = urllib.parse.quote(slug, safe="")
    body: dict[str, Any]
    if path.lower().endswith(".ipynb"):
        route, body = f"/api/exercises/{quoted}/notebook-submissions", {"notebook": text}
    else:
        route, body = f"/api/exercises/{quoted}/submissions", {"code": text}
    if assignment is not None:
        body["assignment_id"] = assignment
    created = _json(_request(server, token, "POST", route, body))
    return str(created["id"])


def events(stream: IO[bytes]) -> Iterator[tuple[str, str]]:
    """Yield ``(event, data)`` of each Server-Sent Event read from ``stream`` (comments skipped)."""
    event, data = "message", []  # type: str, list[str]
    for raw in stream:
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if not line:
            if data:
                yield event, "\n".join(data)
            event, data = "message", []
        elif line.startswith(":"):
            continue
        else:
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                event = value
            elif field == "data":
                data.append(value)
    if data:
        yield event, "\n".join(data)


def follow(server: str, token: str, submission_id: str, out: IO[str], wait_s: float) -> dict[str, Any]:
    """Print the submission's status as it changes until it settles; return it (raise ``Refused`` on time-out)."""
    path = "/api/submissions/" + urllib.parse.quote(submission_id, safe="")
    deadline = time.monotonic() + wait_s
    last: str | None = None
    pause_s = 0.5
    while time.monotonic() < deadline:
        try:
            with _request(server, token, "GET", path + "/events", accept="text/event-stream") as stream:
                for event, data in events(stream):
                    if event != "status":
                        continue
                    sub = json.loads(data)
                    if sub["status"] != last:
                        last = sub["status"]
                        if last in STEPS:
                            print(STEPS[last], file=out, flush=True)
                    if sub["status"] in SETTLED:
                        return dict(sub)
        except (Refused, OSError) as exc:  # OSError: the connection dropped while the stream was being read
            print(f"(status stream interrupted: {exc}; asking again)", file=out, flush=True)
        # The stream ended before a verdict (a restarting server, a proxy's time-out): ask once, then reconnect.
        sub = _json(_request(server, token, "GET", path))
        if sub["status"] in SETTLED:
            print(STEPS[sub["status"]], file=out, flush=True)
            return dict(sub)
        time.sleep(pause_s)
        pause_s = min(pause_s * 2, 5.0)
    raise Refused(f"no verdict within {wait_s:g} s; the submission {submission_id} is still {last or 'queued'}")


def _points(value: float | None) -> str:
    return "-" if value is None else f"{round(value, 2):g}"


def report(sub: dict[str, Any], out: IO[str]) -> int:
    """Print every test, the feedback and the verdict; return the exit status it means."""
    for test in sub.get("tests") or []:
        outcome = test["outcome"] if test.get("visible", True) else "held back"
        print(
            f"{outcome.upper():>9}  {test['name']}  ({_points(test['points'])}/{_points(test['max_points'])})", file=out
        )
        if test.get("message"):
            for line in str(test["message"]).splitlines():
                print("           " + line, file=out)
        if test.get("details"):  # the framework's own words behind the message, for the curious
            print("           details:", file=out)
            for line in str(test["details"]).splitlines():
                print("             " + line, file=out)
    if sub.get("message"):
        print(sub["message"], file=out)
    verdict = sub.get("verdict") or sub["status"]
    score = f"  {_points(sub.get('score'))}/{_points(sub.get('max_score'))}" if sub.get("score") is not None else ""
    device = f"  on {sub['device']}" if sub.get("device") else ""
    print(f"{sub['exercise']}: {verdict}{score}{device}", file=out, flush=True)
    if verdict == "passed":
        return EXIT_PASSED
    return EXIT_CANNOT_GRADE if sub["status"] == "error" or verdict == "internal_error" else EXIT_NOT_PASSED


# The server that serves this file puts its public address here (app/web/routes/pages_account.py).
DEFAULT_SERVER = "http://127.0.0.1:8000"


def main(argv: list[str] | None = None, out: IO[str] = sys.stdout, err: IO[str] = sys.stderr) -> int:
    """Run the command line; return its exit status."""
    parser = argparse.ArgumentParser(prog="gpulab-submit", description=__doc__.split("\n\n")[0])
    parser.add_argument("slug", help="the exercise, as in its address: /exercises/SLUG")
    parser.add_argument("file", help="a .py file, or a .ipynb notebook (its cells tagged 'solution' are graded)")
    parser.add_argument(
        "--server",
        default=os.environ.get("GPULAB_SERVER", DEFAULT_SERVER),
        help=f"the gpulab server (default: $GPULAB_SERVER, else {DEFAULT_SERVER})",
    )
    parser.add_argument(
        "--token",
        default=os.environ.get("GPULAB_TOKEN", ""),
        help="a personal access token with the submit and read scopes (default: $GPULAB_TOKEN)",
    )
    parser.add_argument("--assignment", type=int, help="submit under this assignment id (default: practice)")
    parser.add_argument("--wait-s", type=float, default=1800.0, help="give up waiting after this long")
    args = parser.parse_args(argv)
    if not args.server.startswith(("http://", "https://")):
        print(f"gpulab-submit: --server must be an http:// or https:// address (got {args.server!r})", file=err)
        return EXIT_CANNOT_GRADE
    if not args.token:
        print("gpulab-submit: no token: pass --token or set GPULAB_TOKEN (make one on the account page)", file=err)
        return EXIT_CANNOT_GRADE
    try:
        with open(args.file, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        print(f"gpulab-submit: cannot read {args.file}: {reason}", file=err)
        return EXIT_CANNOT_GRADE
    try:
        submission_id = submit(args.server, args.token, args.slug, args.file, text, args.assignment)
        print(f"submitted {args.file} to {args.slug}: submission {submission_id}", file=out, flush=True)
        return report(follow(args.server, args.token, submission_id, out, args.wait_s), out)
    except Refused as exc:
        print(f"gpulab-submit: {exc}", file=err)
    except (ValueError, KeyError, TypeError) as exc:
        print(f"gpulab-submit: the server answered something unexpected ({exc!r}); is --server a gpulab?", file=err)
    except KeyboardInterrupt:
        print("gpulab-submit: stopped; the submission, if sent, is still graded", file=err)
    return EXIT_CANNOT_GRADE


if __name__ == "__main__":
    sys.exit(main())
