"""Quiz exercises: the ``quiz.toml`` format, checking a learner's answers, and grading them.

Contract, by module (the format kit shared with ``exercise.toml`` is ``worker.bank.formatkit``, rubric items and
their score ``worker.bank.rubric``):
- ``format``: the pydantic models of ``quiz.toml`` (``Quiz`` and its questions), ``parse_quiz``, and the public
  view that may reach a learner before answering.
- ``answers``: ``check_answers`` (a request's answers into canonical form, or ``InvalidInput``) and
  ``canonical_json`` (their stored form).
- ``grading``: ``grade`` (canonical answers into a ``QuizResult`` of ``QuestionResult``) and the scoring rules.
``grading`` and ``answers`` sit on ``format`` and never on each other.
"""
