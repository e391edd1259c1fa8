"""Every known-wrong variant in the bank declares the feedback its failure message must contain.

``gpulab exercises check`` then proves each message names the variant's mistake (worker/grading/bankcheck.py);
a variant without a fragment would only be proven to fail, perhaps for another reason.
"""

from __future__ import annotations

from tests.support import BANK
from worker.bank.spec import load_bank


def test_every_wrong_variant_declares_a_feedback_fragment() -> None:
    specs = load_bank(BANK)
    variants = [(s.slug, v) for s in specs for v in s.wrong]
    assert len(variants) >= 60, "the bank's wrong variants were not found"
    missing = [f"{slug}/{v.path}" for slug, v in variants if not v.feedback]
    assert missing == [], f"[[wrong]] entries without feedback: {missing}"
