"""Jupyter notebooks of code exercises: the one a learner downloads, and the code a submitted one holds.

Contract:
- ``exercise_notebook(exercise)`` builds an nbformat 4 notebook of the exercise's current version: the title and
  the prompt as markdown, the starter code in a code cell tagged ``solution`` (cell metadata ``tags``), and the
  visible examples as code cells tagged ``examples`` that run against what the kernel defined (the harness that runs
  them comes first, its source collapsed: ``jupyter.source_hidden``, so the learner's own work comes first). Its metadata
  carries ``gpulab: {exercise, version}`` and a Python 3 kernelspec. Only files a learner may read go in:
  ``prompt.md``, ``starter.py``, ``examples/*`` and ``probes.py`` (the learner's own process loads the probes
  while it is graded, so they hold nothing the learner cannot read); never hidden tests or solutions.
- ``extract_code(text, slug=...)`` reads an uploaded ``.ipynb`` (its file text; a UTF-8 byte order mark is
  accepted) with ``nbformat`` and returns the source of its code cells tagged ``solution``, in order, exactly as
  saved: nothing is stripped or added, except one newline between two cells where the first does not end with one
  (cells are separate lines), and cells holding only whitespace are left out. That is what is graded and stored.
  Outputs are ignored (dropped before validation). It raises ``PayloadTooLarge`` (over ``MAX_NOTEBOOK_BYTES``,
  told by ``humane.notebook_too_large``, as the body limit tells a larger upload) or ``InvalidInput`` naming what
  is wrong with the file in words of its own, never a parser's: not JSON (cut off, or where it breaks), not a
  notebook, an ``nbformat`` that is not the number 4 (or 3), cells that are not a list of objects, a notebook that
  fails validation, more than ``MAX_CELLS`` cells, a kernel of another language, made for another exercise (its
  ``gpulab.exercise`` metadata), no tagged code cell, only empty tagged cells, or IPython magics/shell lines that
  keep the code from being Python. It runs nothing; the caller stores nothing when it raises, so a refusal costs no
  attempt.
"""

from __future__ import annotations

import ast
import json
import re
import warnings
from typing import Any

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from app.domain.models import Exercise
from app.domain.catalog.specs import spec_of
from worker.core import humane
from worker.core.errors import InvalidInput, PayloadTooLarge

SOLUTION_TAG = "solution"
EXAMPLES_TAG = "examples"
MAX_NOTEBOOK_BYTES = 4 * 1024 * 1024  # outputs (plots) make notebooks large; the code in them is small
MAX_CELLS = 1000
MEDIA_TYPE = "application/x-ipynb+json"
_MAGIC_LINE = re.compile(r"^\s*[%!]")

# The examples' harness, run in the learner's kernel. Kept by hand: nothing pip-installable runs pytest-style
# tests against a notebook's namespace, and the learner's kernel must need nothing beyond the standard library.
_HARNESS = '''\
# gpulab: the visible example tests, run against what this notebook defined. Not graded.
# Run your solution cell first, then these cells. An example that needs gpulab's grader (virtual GPUs,
# several processes) says so and is skipped here: use "Run example tests" on the exercise page for it.
import inspect as _inspect
import pathlib as _pathlib
import sys as _sys
import tempfile as _tempfile
import types as _types

_GPULAB_PROBES = {probes}
_GPULAB_PARAMS = {params}  # your variant of the exercise: the numbers in your prompt


def gpulab_examples(name, source):
    """Run the test functions of one example file against this notebook's definitions; print each outcome."""
    submission = _types.ModuleType("submission")
    submission.__dict__.update({{k: v for k, v in globals().items() if not k.startswith("_")}})
    _sys.modules["submission"] = submission
    if _GPULAB_PROBES is not None:
        probes = _types.ModuleType("probes")
        exec(compile(_GPULAB_PROBES, "probes.py", "exec"), probes.__dict__)
        _sys.modules["probes"] = probes

    def probe(probe_name, *args, **kwargs):
        return getattr(_sys.modules["probes"], probe_name)(submission, *args, **kwargs)

    fixtures = {{
        "submission": lambda: submission,
        "probe": lambda: probe,
        "params": lambda: dict(_GPULAB_PARAMS),
        "tmp_path": lambda: _pathlib.Path(_tempfile.mkdtemp()),
    }}
    tests = _types.ModuleType(name.removesuffix(".py"))
    try:
        exec(compile(source, name, "exec"), tests.__dict__)
    except ImportError as exc:
        print(f"SKIP {{name}}: {{exc}} (it runs on gpulab's grader only)")
        return
    passed = failed = 0
    for test_name, test in list(vars(tests).items()):
        if not test_name.startswith("test") or not callable(test):
            continue
        wanted = list(_inspect.signature(test).parameters)
        missing = [p for p in wanted if p not in fixtures]
        if missing:
            print(f"SKIP {{test_name}}: needs {{', '.join(missing)}}, which only gpulab's grader provides")
            continue
        try:
            test(*[fixtures[p]() for p in wanted])
        except KeyboardInterrupt:
            raise
        except ImportError as exc:
            print(f"SKIP {{test_name}}: {{exc}} (it runs on gpulab's grader only)")
        except BaseException as exc:  # pytest.fail raises a BaseException
            failed += 1
            print(f"FAIL {{test_name}}: {{type(exc).__name__}}: {{exc}}")
        else:
            passed += 1
            print(f"PASS {{test_name}}")
    print(f"{{name}}: {{passed}} passed, {{failed}} failed")
'''


def _literal(text: str) -> str:
    """Return ``text`` as a Python string literal a person can read (a raw triple-quoted one where it can be)."""
    if "'''" not in text and not text.endswith("\\") and "\r" not in text:
        return "r'''" + text + "'''"
    return repr(text)


def _cell(source: str, tag: str, *, hidden: bool = False) -> Any:
    metadata: dict[str, Any] = {"tags": [tag]}
    if hidden:  # JupyterLab, Notebook 7 and VS Code show a collapsed cell's source as "..." until clicked
        metadata["jupyter"] = {"source_hidden": True}
    return new_code_cell(source, metadata=metadata)


def exercise_notebook(exercise: Exercise, params: dict[str, Any] | None = None) -> Any:
    """Return the notebook of ``exercise``'s current version (an ``nbformat.NotebookNode``).

    ``params``: the learner's variant (``app.domain.catalog.variants``) the prompt and starter are rendered for; ``None``:
    the default variant.
    """
    version = exercise.current_version
    if version is None or version.kind != "code":
        kind = version.kind if version else "exercise without a version"
        raise InvalidInput(f"exercise {exercise.slug!r} is a {kind}, not a code exercise: it has no notebook")
    files: dict[str, str] = dict(version.files)
    spec = spec_of(version)
    variant = spec.default_params if params is None else params
    files.update({p: spec.rendered(p, variant) for p in ("prompt.md", "starter.py") if p in files})
    examples = sorted((p.removeprefix("examples/"), c) for p, c in files.items() if p.startswith("examples/"))
    notebook = new_notebook(
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
            "language_info": {"name": "python"},
            "gpulab": {"exercise": exercise.slug, "version": version.number},
        }
    )
    cells = [
        new_markdown_cell(
            f"# {version.title}\n\n*gpulab exercise `{exercise.slug}`, version {version.number}, "
            f"{version.framework}, {version.max_score:g} points.*"
        ),
        new_markdown_cell(files.get("prompt.md", "")),
        new_markdown_cell(
            "## Your solution\n\n"
            f"Write your code in the next cell: it carries the tag `{SOLUTION_TAG}`, and only code cells with that "
            "tag are graded (in order, as one file). Keep imports and helpers there too; IPython magics (`%...`, "
            "`!...`) belong in other cells.\n\n"
            "Submit the saved notebook by dropping it on the exercise page, or from a terminal with "
            f"`python3 gpulab-submit.py {exercise.slug} this-notebook.ipynb` (the script is served at "
            "`/cli/gpulab-submit.py`)."
        ),
        _cell(files.get("starter.py", ""), SOLUTION_TAG),
    ]
    if examples:
        probes = files.get("probes.py")
        cells.append(
            new_markdown_cell(
                "## Example tests (not graded)\n\nThese run the exercise's visible examples against what this "
                "notebook defined, in this kernel, on this machine's devices. The hidden tests check more. Run the "
                "next cell first: it defines the small harness that runs them (its code is collapsed; click it to "
                "read it)."
            )
        )
        harness = _HARNESS.format(probes=_literal(probes) if probes is not None else "None", params=repr(variant))
        cells.append(_cell(harness, EXAMPLES_TAG, hidden=True))
        cells += [_cell(f"gpulab_examples({name!r}, {_literal(source)})", EXAMPLES_TAG) for name, source in examples]
    notebook.cells = cells
    return notebook


def notebook_text(exercise: Exercise, params: dict[str, Any] | None = None) -> str:
    """Return the ``.ipynb`` file text of ``exercise``'s notebook, in the variant ``params`` (None: the default)."""
    return str(nbformat.writes(exercise_notebook(exercise, params)))


# --- reading a submitted notebook ---------------------------------------------------------------------------


SAVE_AGAIN = "save the notebook again in Jupyter and upload the .ipynb file it wrote"


def _parse(text: str) -> dict[str, Any]:
    """Return the notebook's JSON object, or raise ``InvalidInput`` saying what is wrong with the file."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated"):
            raise InvalidInput(
                f"this is not a complete notebook: its text stops in the middle (line {exc.lineno}), as a file cut "
                f"off while it was saved or copied does; {SAVE_AGAIN}"
            ) from None
        raise InvalidInput(
            f"this is not a notebook: it is not JSON (it breaks at line {exc.lineno}, column {exc.colno}); "
            f"{SAVE_AGAIN}"
        ) from None
    except RecursionError:
        raise InvalidInput("this is not a notebook: its JSON is nested too deeply") from None
    if not isinstance(data, dict) or "nbformat" not in data:
        raise InvalidInput('this is not a notebook: the JSON has no "nbformat" version (is it an .ipynb file?)')
    version = data["nbformat"]
    if type(version) is not int:
        shown = f"the text {version!r}" if isinstance(version, str) else f"{json.dumps(version)[:40]}"
        raise InvalidInput(
            f'the notebook\'s "nbformat" must be the number 4 (or 3), and it is {shown}; the file was changed by '
            f"hand or by another program: {SAVE_AGAIN}"
        )
    if version not in (3, 4):
        raise InvalidInput(
            f"the notebook is in nbformat {version}; gpulab reads nbformat 4 (and 3), which Jupyter writes: "
            f"{SAVE_AGAIN}"
        )
    for key in ("cells", "worksheets"):
        found = data.get(key)
        if found is not None and not (isinstance(found, list) and all(isinstance(c, dict) for c in found)):
            raise InvalidInput(
                f'the notebook\'s "{key}" must be a list of {key[:-1]} objects, and it is '
                f"{_json_kind(found)}; the file is damaged: {SAVE_AGAIN}"
            )
    return data


def _json_kind(value: Any) -> str:
    """Name a JSON value's kind for a person: "an object", "a text", "a list holding a text", ..."""
    kinds = {dict: "an object", list: "a list", str: "a text", bool: "true or false", type(None): "null"}
    if isinstance(value, list):
        odd = next((v for v in value if not isinstance(v, dict)), None)
        return f"a list holding {_json_kind(odd)}" if value else "an empty list"
    return kinds.get(type(value), "a number")


def _cell_lists(data: dict[str, Any]) -> list[list[Any]]:
    """Return the notebook's lists of cells: one in nbformat 4, one per worksheet in nbformat 3."""
    lists = [data.get("cells")] + [ws.get("cells") for ws in data.get("worksheets") or [] if isinstance(ws, dict)]
    return [cells for cells in lists if isinstance(cells, list)]


def _read(text: str) -> Any:
    """Return the notebook as nbformat 4 without its outputs, or raise ``InvalidInput`` with nbformat's reason."""
    data = _parse(text)
    lists = _cell_lists(data)
    count = sum(len(cells) for cells in lists)
    if count > MAX_CELLS:
        raise InvalidInput(f"the notebook has {count} cells; at most {MAX_CELLS} are accepted")
    for cells in lists:
        for cell in cells:
            if isinstance(cell, dict) and isinstance(cell.get("outputs"), list):
                # Outputs are never graded: dropped before validation, so thousands of them cost no CPU time.
                cell["outputs"] = []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # nbformat warns about what validate() reports next
            notebook = nbformat.reads(json.dumps(data), as_version=4)
            nbformat.validate(notebook)
    except nbformat.NBFormatError as exc:
        raise InvalidInput(f"nbformat cannot read this notebook: {exc}") from None
    except nbformat.ValidationError as exc:
        version = data.get("nbformat")
        raise InvalidInput(f"the notebook is not valid nbformat {version}: {_short(exc.message)}") from None
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise InvalidInput(f"nbformat cannot read this notebook: {_short(str(exc))}") from None
    return notebook


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "…"


def _check_kernel(metadata: Any) -> None:
    kernelspec = metadata.get("kernelspec") or {}
    language = kernelspec.get("language") if isinstance(kernelspec, dict) else None
    info = metadata.get("language_info") or {}
    if not language and isinstance(info, dict):
        language = info.get("name")
    if isinstance(language, str) and language.strip().lower() not in ("python", "python3", ""):
        name = kernelspec.get("display_name") if isinstance(kernelspec, dict) else None
        kernel = f" ({name})" if isinstance(name, str) and name else ""
        raise InvalidInput(
            f"the notebook's kernel runs {language!r}{kernel}; gpulab grades Python: use a Python 3 kernel"
        )


def _check_exercise(metadata: Any, slug: str) -> None:
    gpulab = metadata.get("gpulab")
    made_for = gpulab.get("exercise") if isinstance(gpulab, dict) else None
    if isinstance(made_for, str) and made_for != slug:
        raise InvalidInput(
            f"this notebook is for exercise {made_for!r}, not {slug!r}: submit it there, or download this "
            "exercise's notebook"
        )


def _check_python(code: str) -> None:
    """Refuse code that is not Python because of IPython magics or shell lines, naming the first one."""
    try:
        ast.parse(code)
    except (SyntaxError, ValueError):
        for number, line in enumerate(code.splitlines(), start=1):
            if _MAGIC_LINE.match(line):
                raise InvalidInput(
                    f"line {number} of the solution cells is IPython, not Python ({_short(line.strip(), 80)!r}): "
                    "the grader runs plain Python; move magics and shell commands to a cell without the "
                    f"{SOLUTION_TAG!r} tag"
                ) from None
        # Any other syntax error is the learner's to see in the grader's feedback, as from the editor.


def extract_code(text: str, *, slug: str) -> str:
    """Return the code of ``text``'s ``solution``-tagged cells, or raise saying why the notebook is refused."""
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if size > MAX_NOTEBOOK_BYTES:
        raise PayloadTooLarge(humane.notebook_too_large(size, MAX_NOTEBOOK_BYTES))
    # Some editors (Windows Notepad, older VS Code) save UTF-8 with a byte order mark; JSON has no place for it.
    notebook = _read(text.removeprefix("\ufeff"))
    _check_kernel(notebook.metadata)
    _check_exercise(notebook.metadata, slug)
    tagged = [
        cell.source
        for cell in notebook.cells
        if cell.cell_type == "code" and SOLUTION_TAG in (cell.metadata.get("tags") or [])
    ]
    if not tagged:
        raise InvalidInput(
            f"no code cell is tagged {SOLUTION_TAG!r}: add the tag to the cell with your answer (Jupyter: the "
            f'cell\'s property inspector, Cell Tags; or its metadata {{"tags": ["{SOLUTION_TAG}"]}})'
        )
    sources = [source for source in tagged if source.strip()]
    if not sources:
        raise InvalidInput(f"the code cells tagged {SOLUTION_TAG!r} are empty: write your answer there")
    # Exactly what the learner wrote; a cell ends a line, so a newline goes between two cells only where the first
    # does not end with one.
    code = "".join(s if s.endswith("\n") or i == len(sources) - 1 else s + "\n" for i, s in enumerate(sources))
    _check_python(code)
    return code
