"""Every quiz question about a program's output is checked by running that program with the real library.

Each program runs in a fresh interpreter (``setup``, then the ``source`` learners see, then ``check``), so
TensorFlow's process-wide device configuration and Keras' global state never leak from one program into the
next. The printed output must equal the ``expected_output`` that the keyed option repeats (the loader already
enforces that the keyed option's text equals ``expected_output``). TensorFlow programs are marked ``slow``.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support import BANK
from worker.bank.quiz.format import Program, parse_quiz
from worker.bank.spec import load_bank

TIMEOUT_S = 300  # a TensorFlow import alone takes seconds on a busy 2-core machine


def _programs() -> list[object]:
    params: list[object] = []
    for spec in load_bank(BANK):
        if spec.kind != "quiz":
            continue
        for question in parse_quiz(spec.slug, spec.files["quiz.toml"]).questions:
            if question.program is None:
                continue
            marks = [pytest.mark.slow] if question.program.framework == "tensorflow" else []
            params.append(pytest.param(question.program, id=f"{spec.slug}::{question.id}", marks=marks))
    return params


PROGRAMS = _programs()


def test_the_bank_has_program_questions() -> None:
    assert len(PROGRAMS) >= 4, "the curriculum checks several answers by running programs"


@pytest.mark.parametrize("program", PROGRAMS)
def test_program_prints_the_keyed_answer(program: Program, tmp_path: object) -> None:
    code = "\n".join([program.setup, program.source, program.check])
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULAB_")}
    # The programs stand in for GPUs with CPU devices; a real GPU here would change what they measure.
    env.update({"CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONHASHSEED": "0"})
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=str(tmp_path),
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, f"the program failed (exit {done.returncode}):\n{done.stderr[-3000:]}"
    assert done.stdout.strip() == program.expected_output, (
        f"the program printed {done.stdout.strip()!r} but the quiz's key says {program.expected_output!r}"
    )
