"""Each learner's variant of an exercise with parameters: drawn from a keyed seed, shown, kept, graded.

Contract:
- ``variant_seed(secret=..., user_id=..., assignment_id=..., slug=...)`` is an HMAC-SHA256, under the server's
  secret (``Settings.session_secret``), of the learner, the assignment (or practice) and the exercise slug. It is
  stable for as long as the secret is (restarts, new versions of the exercise), differs between learners and
  between an assignment and practice, and cannot be computed for another learner without the secret.
- ``params_for`` draws the variant of a learner in one context from a version's ``[params]``
  (``ExerciseData.draw_params``); ``{}`` for an exercise without parameters, the default variant for no learner.
- ``create_submission`` stores the variant with the submission (``Submission.params``); grading reads it back
  through ``params_to_grade``, which keeps every stored value the graded version still offers (a regrade against
  a version whose parameters changed draws only what is missing), so regrades and re-runs use the same numbers.
- A page shows the variant of the context a submission from it counts under (``coursework.variant_context``: the
  practice page of an exercise a ``counted`` assignment binds shows that assignment's).
- The prompt and starter a learner reads are rendered for their variant (``ExerciseDetail.of(..., params=...)``).
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from app.domain.catalog.specs import spec_of
from app.domain.models import ExerciseVersion, Submission, User
from app.settings import Settings, get_settings
from worker.bank.specdata import ExerciseData, ParamValue

Params = dict[str, ParamValue]


def variant_seed(*, secret: str, user_id: int, assignment_id: int | None, slug: str) -> bytes:
    """Return the seed of one learner's variant of ``slug`` under an assignment (``None``: practice)."""
    context = f"assignment:{assignment_id}" if assignment_id is not None else "practice"
    message = "\0".join(("gpulab-variant-v1", str(user_id), context, slug)).encode()
    return hmac.new(secret.encode(), message, hashlib.sha256).digest()


def params_for(
    *, spec: ExerciseData, user: User | None, assignment_id: int | None, settings: Settings | None = None
) -> Params:
    """Return ``user``'s variant of ``spec`` under ``assignment_id`` (``{}`` without parameters)."""
    if not spec.params:
        return {}
    if user is None:
        return spec.default_params
    secret = (settings or get_settings()).session_secret()
    return spec.draw_params(variant_seed(secret=secret, user_id=user.id, assignment_id=assignment_id, slug=spec.slug))


def params_to_grade(*, spec: ExerciseData, submission: Submission, settings: Settings | None = None) -> Params:
    """Return the variant to grade ``submission`` in: its stored values, each drawn again only if ``spec`` lacks it."""
    stored: dict[str, Any] = submission.params or {}
    kept = {p.name: stored[p.name] for p in spec.params if p.name in stored and stored[p.name] in p.values}
    if len(kept) == len(spec.params):
        return kept  # the usual case: the variant it was made in (no secret needed to grade it)
    drawn = params_for(spec=spec, user=submission.user, assignment_id=submission.assignment_id, settings=settings)
    return {p.name: kept.get(p.name, drawn[p.name]) for p in spec.params}


def version_params(*, version: ExerciseVersion, user: User | None, assignment_id: int | None) -> Params:
    """Return ``user``'s variant of ``version`` under ``assignment_id``."""
    spec = spec_of(version)
    return params_for(spec=spec, user=user, assignment_id=assignment_id)
