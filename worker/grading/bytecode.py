"""Compile a job's trusted Python files once per content, so that no judge or subject compiles them per job.

Contract:
- ``cached_files(folder, name, text)`` returns ``{relative path: bytes}``: the bytecode cache entries to write
  beside ``folder/name`` (a trusted file of the exercise: a hidden test or a probe) in a job directory, or ``{}``
  when the text does not compile (the runner then reports it as it always did).
  - a test module (``tests/test_*.py``, ``conftest.py``): as pytest's assertion rewriting makes it, under the file
    name pytest looks for (``__pycache__/<name>.<tag>-pytest-<version>.pyc``);
  - any other module (a probe, a helper of the tests): as CPython's import caches it (``__pycache__/<name>.<tag>.pyc``).
- Both are checked-hash pycs (PEP 552): whoever reads one compares it with the source's hash first, so a cache that
  does not match its file, or one written for another Python or pytest, is ignored and the file is compiled as
  before. Only the host writes them; the sandboxes see them read-only, like the files they belong to.
- Compiled code is kept per (folder, name, text) in this process, so a busy worker compiles each version once.

Why by hand: the job folder is new for every grading and read-only inside the sandbox, so neither CPython nor pytest
can keep its own cache there; a warm judge paid ~20 ms per job to parse, rewrite and compile a 500-line test file.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import marshal
import sys
import threading
import types
from pathlib import PurePosixPath

from worker.grading.sandbox.policy import JOB_MOUNT

# A checked-hash pyc's flags (PEP 552): bit 0, hash-based; bit 1, check the source's hash when loading.
CHECKED_HASH = (0b11).to_bytes(4, "little")
# CPython 3.11 counts the AST's recursion depth per interpreter, not per thread: two grading threads compiling at
# once can fail with "AST constructor recursion depth mismatch". One compiles at a time (once per content anyway).
_COMPILING = threading.Lock()


def _pyc(source: bytes, code: types.CodeType) -> bytes:
    return importlib.util.MAGIC_NUMBER + CHECKED_HASH + importlib.util.source_hash(source) + marshal.dumps(code)


def cached_files(folder: str, name: str, text: str) -> dict[str, bytes]:
    """Return the bytecode cache files for ``folder/name`` holding ``text`` (paths relative to ``folder``)."""
    path = PurePosixPath(name)
    if path.suffix != ".py" or folder not in ("tests", "probes"):
        return {}
    try:
        return _compiled(folder, name, text)
    except Exception:  # a cache only saves time: whatever fails here, the sandbox compiles the file as before
        return {}  # not remembered: a failure of the moment (the race below) must not cost this file its cache


@functools.lru_cache(maxsize=256)
def _compiled(folder: str, name: str, text: str) -> dict[str, bytes]:
    path = PurePosixPath(name)
    source = text.encode("utf-8")
    where = f"{JOB_MOUNT}/{folder}/{name}"  # the file's path as the judge and the subject see it
    cache = path.parent / "__pycache__"
    with _COMPILING:
        return _compile(folder, path, source, where, cache)


def _compile(folder: str, path: PurePosixPath, source: bytes, where: str, cache: PurePosixPath) -> dict[str, bytes]:
    # pytest rewrites the modules it collects (``runner.plugin``: ``python_files=test_*.py``) and conftest files;
    # every other module (a probe, a helper the tests import) is imported by CPython.
    if folder == "probes" or not (path.name.startswith("test_") or path.name == "conftest.py"):
        code = compile(source, where, "exec", dont_inherit=True)
        return {str(cache / f"{path.stem}.{sys.implementation.cache_tag}.pyc"): _pyc(source, code)}
    from _pytest.assertion.rewrite import PYC_TAIL, rewrite_asserts

    tree = ast.parse(source, filename=where)
    rewrite_asserts(tree, source, where, None)
    code = compile(tree, where, "exec", dont_inherit=True)
    return {str(cache / f"{path.stem}{PYC_TAIL}"): _pyc(source, code)}
