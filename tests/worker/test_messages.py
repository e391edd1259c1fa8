"""What a learner reads of a failure: terminal codes removed, tracebacks folded into their last line."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from worker.bank.spec import ExerciseSpec
from worker.grading.messages import clean_message
from worker.grading.pipeline import grade
from worker.grading.sandbox.fake import FakeSandbox

SpecFactory = Callable[..., ExerciseSpec]
# What torch 2.13's torch.load prints for a pickled module (exercises/FACTS.md): bold codes around a clause.
TORCH_BOLD = (
    "Weights only load failed. This file can still be loaded, to do so you have two options, \x1b[1mdo those steps "
    "only if you trust the source of the checkpoint\x1b[0m. \n\t(1) In PyTorch 2.6, we changed the default"
)
TRACEBACK = """checkpoint could not be read:
Traceback (most recent call last):
  File "/job/runner/vdev/ddp.py", line 88, in _rank_main
    result = fn(rank, world_size)
  File "/job/submission/submission.py", line 41, in train
    torch.save(model.module, path)
  File "/usr/lib/python3/site-packages/torch/serialization.py", line 900, in save
    raise RuntimeError("disk full")
RuntimeError: disk full
then the next line"""


def test_ansi_codes_and_control_characters_are_removed() -> None:
    cleaned = clean_message(TORCH_BOLD)
    assert "\x1b" not in cleaned and "[1m" not in cleaned and "[0m" not in cleaned
    assert "two options, do those steps only if you trust the source of the checkpoint. \n\t(1) In PyTorch" in cleaned
    assert clean_message("red \x1b[31;1mERROR\x1b[m\r\n bell\x07 osc \x1b]0;title\x07end") == "red ERROR\n bell osc end"


def test_a_traceback_becomes_its_exception_and_the_learners_line() -> None:
    assert clean_message(TRACEBACK) == (
        "checkpoint could not be read:\nRuntimeError: disk full (your code, line 41)\nthen the next line"
    )


def test_a_chained_traceback_keeps_the_last_exception_and_a_harness_only_one_names_no_line() -> None:
    chained = (
        "Traceback (most recent call last):\n  File \"/job/probes/probes.py\", line 3, in run\n    x = d['k']\n"
        "KeyError: 'k'\n\nDuring handling of the above exception, another exception occurred:\n\n"
        'Traceback (most recent call last):\n  File "/job/probes/probes.py", line 5, in run\n'
        "    raise ValueError('v')\n"
        "ValueError: no value for k\nover two lines"
    )
    assert clean_message(chained) == "ValueError: no value for k\nover two lines"


@pytest.mark.parametrize("text", ["", "add(1, 2) should be 3", "a\n\tb"])
def test_a_plain_message_is_kept(text: str) -> None:
    assert clean_message(text) == text


def test_the_pipeline_cleans_what_the_runner_reported(tiny_spec: SpecFactory) -> None:
    fake = FakeSandbox(
        lambda job: job.reply(
            {"test_add.py::test_small": "failed"},
            messages={"test_add.py::test_small": TORCH_BOLD + "\n" + TRACEBACK},
            error="collection:\n" + TRACEBACK,
        )
    )
    outcome = grade(tiny_spec(), "def add(a, b):\n    return a + b\n", sandbox=fake)
    small = outcome.tests[0]
    assert "\x1b" not in small.message and "Traceback" not in small.message
    assert "RuntimeError: disk full (your code, line 41)" in small.message
    assert (
        outcome.message == "collection:\ncheckpoint could not be read:\nRuntimeError: disk full (your code, line 41)\n"
        "then the next line"
    )
