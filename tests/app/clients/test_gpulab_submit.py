"""The learner's command line (``app/clients/gpulab_submit.py``) without a server: its event-stream reader, the
report and exit status of each kind of result, and the refusals it makes before sending anything."""

from __future__ import annotations

import io
from typing import Any

from app.clients import gpulab_submit as cli


def test_events_are_read_as_the_server_frames_them() -> None:
    stream = io.BytesIO(
        b': keep-alive\r\n\r\nevent: status\r\ndata: {"a": 1}\r\n\r\n'
        b'event: status\ndata:{"b":\ndata: 2}\n\n: ping\n\nevent: status\ndata: {"c": 3}\n'
    )
    assert list(cli.events(stream)) == [("status", '{"a": 1}'), ("status", '{"b":\n2}'), ("status", '{"c": 3}')]


def _result(**fields: Any) -> dict[str, Any]:
    base = {"exercise": "add", "status": "graded", "verdict": "passed", "score": 5.0, "max_score": 5.0,
            "device": "cpu", "message": "", "tests": []}  # fmt: skip
    return {**base, **fields}


def test_the_report_names_each_test_and_exits_with_the_verdicts_code() -> None:
    out = io.StringIO()
    tests = [
        {"name": "t.py::test_a", "outcome": "passed", "message": "", "points": 2.0, "max_points": 2.0},
        {"name": "t.py::test_b", "outcome": "failed", "message": "add(1, 2) returned -1\nexpected 3", "points": 0.0,
         "max_points": 3.0},
        {"name": "t.py::test_c", "outcome": "hidden", "message": "", "points": 0.0, "max_points": 1.0,
         "visible": False},
    ]  # fmt: skip
    assert cli.report(_result(verdict="failed", score=2.0, tests=tests), out) == cli.EXIT_NOT_PASSED
    text = out.getvalue()
    assert "   PASSED  t.py::test_a  (2/2)" in text and "   FAILED  t.py::test_b  (0/3)" in text
    assert "           add(1, 2) returned -1\n           expected 3" in text
    assert "HELD BACK  t.py::test_c  (0/1)" in text and text.rstrip().endswith("add: failed  2/5  on cpu")
    assert cli.report(_result(), io.StringIO()) == cli.EXIT_PASSED
    ours = _result(status="error", verdict="internal_error", score=None, message="the sandbox was lost")
    out = io.StringIO()
    assert cli.report(ours, out) == cli.EXIT_CANNOT_GRADE and "the sandbox was lost" in out.getvalue()
    assert cli.report(_result(verdict="timeout", score=0.0), io.StringIO()) == cli.EXIT_NOT_PASSED


def test_it_refuses_before_sending_without_a_token_a_readable_file_or_an_http_server(tmp_path: Any) -> None:
    code = tmp_path / "a.py"
    code.write_text("x = 1\n")
    err = io.StringIO()
    assert cli.main(["add", str(code), "--server", "http://127.0.0.1:9", "--token", ""], err=err) == 2
    assert "no token" in err.getvalue()
    err = io.StringIO()
    assert cli.main(["add", str(code), "--server", "file:///etc", "--token", "t"], err=err) == 2
    assert "http:// or https://" in err.getvalue()
    err = io.StringIO()
    assert cli.main(["add", str(tmp_path / "missing.py"), "--server", "http://127.0.0.1:9", "--token", "t"],
                    err=err) == 2  # fmt: skip
    assert "cannot read" in err.getvalue()
    err = io.StringIO()
    assert cli.main(["add", str(code), "--server", "http://127.0.0.1:9", "--token", "t"], err=err) == 2
    assert "cannot reach http://127.0.0.1:9" in err.getvalue()
