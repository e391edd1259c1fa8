"""A job's trusted files come with bytecode that CPython and pytest load instead of compiling, while it matches."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest
from _pytest.assertion.rewrite import PYC_TAIL, _read_pyc

from worker.grading import bytecode

TEST = textwrap.dedent(
    """
    def test_sum():
        total = 1 + 1
        assert total == 2, "one and one"
    """
)


def _write(folder: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)


def test_a_test_module_gets_pytests_rewritten_pyc_which_pytest_reads(tmp_path: Path) -> None:
    files = bytecode.cached_files("tests", "test_sum.py", TEST)
    assert list(files) == [f"__pycache__/test_sum{PYC_TAIL}"]
    (tmp_path / "test_sum.py").write_text(TEST)
    _write(tmp_path, files)
    code = _read_pyc(tmp_path / "test_sum.py", tmp_path / "__pycache__" / f"test_sum{PYC_TAIL}")
    assert code is not None
    test_code = next(c for c in code.co_consts if getattr(c, "co_name", "") == "test_sum")
    assert any(name.startswith("@py_") for name in test_code.co_names)  # the asserts are pytest's rewritten ones
    assert test_code.co_filename == str(tmp_path / "test_sum.py")


def test_a_changed_test_file_is_compiled_again_not_read_from_the_cache(tmp_path: Path) -> None:
    _write(tmp_path, bytecode.cached_files("tests", "test_sum.py", TEST))
    (tmp_path / "test_sum.py").write_text(TEST.replace("1 + 1", "2 + 0"))
    assert _read_pyc(tmp_path / "test_sum.py", tmp_path / "__pycache__" / f"test_sum{PYC_TAIL}") is None


@pytest.mark.parametrize(("folder", "name"), [("probes", "probes.py"), ("tests", "helpers.py")])
def test_other_modules_get_cpythons_pyc_which_import_uses_while_it_matches(
    tmp_path: Path, folder: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # as in the sandbox: read a cache, never write one
    files = bytecode.cached_files(folder, name, "VALUE = 1\n")
    stem = name.removesuffix(".py")
    assert list(files) == [f"__pycache__/{stem}.{sys.implementation.cache_tag}.pyc"]
    # A cache of other code, with the right source hash, shows which of the two import ran.
    forged = bytecode._pyc(b"VALUE = 1\n", compile("VALUE = 2\n", name, "exec"))
    _write(tmp_path, {next(iter(files)): forged})

    def load(source: str) -> object:
        (tmp_path / name).write_text(source)
        spec = importlib.util.spec_from_file_location(f"{stem}_{len(source)}", tmp_path / name)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.VALUE

    assert load("VALUE = 1\n") == 2  # the cache was used
    assert load("VALUE = 1  # edited\n") == 1  # the source changed: compiled from it, the cache ignored


def test_a_file_that_does_not_compile_or_is_not_python_gets_no_cache() -> None:
    assert bytecode.cached_files("tests", "test_broken.py", "def test(:\n") == {}
    assert bytecode.cached_files("tests", "data.json", "{}") == {}
    assert bytecode.cached_files("submission", "submission.py", "X = 1\n") == {}


def test_compiling_holds_one_lock_and_any_failure_only_costs_the_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    # CPython 3.11's AST validation is not thread-safe: two grading threads compiling at once failed with a
    # SystemError ("AST constructor recursion depth mismatch"), which cost a learner a platform error.
    held = []
    real_parse = bytecode.ast.parse

    def parse(*args: object, **kwargs: object) -> object:
        held.append(bytecode._COMPILING.locked())
        return real_parse(*args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(bytecode.ast, "parse", parse)
    assert bytecode.cached_files("tests", "test_lock.py", TEST) and held == [True]

    def broken(*args: object, **kwargs: object) -> object:
        raise SystemError("AST constructor recursion depth mismatch (before=39, after=33)")

    monkeypatch.setattr(bytecode.ast, "parse", broken)
    assert bytecode.cached_files("tests", "test_broken_host.py", TEST) == {}
    monkeypatch.setattr(bytecode.ast, "parse", real_parse)  # the failure was of the moment: not remembered
    assert bytecode.cached_files("tests", "test_broken_host.py", TEST)
