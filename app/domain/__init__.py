"""The platform's records and rules, one package per bounded context; imports go down this list only.

Contract, by package (``pyproject.toml``'s import-linter contracts hold the order; ``docs/architecture.md``):
- ``exercises``: the bank in the database (sync), authoring drafts and publishing, instructor checks, example runs,
  notebooks.
- ``review``: staff grading queues and release, regrade requests, similarity runs, insights.
- ``operations``: the admin dashboard's numbers, metrics, worker liveness.
- ``results``: where a counted result lands (``settle``) and the staff grade records it applies.
- ``lti``: LTI 1.3 Advantage, tool side (its ``__init__`` lists its steps).
- ``courses``: membership and course roles, the policy of who sees whose work, assignment rules, coursework
  actions and the submit gate, the gradebook, result visibility.
- ``submissions``: a submission's life (create, claim, record, recover), progress, regrades, quiz attempts.
- ``accounts``: people (admin-made accounts, CSV import), passwords and e-mail rules, API tokens.
- ``catalog``: a stored exercise version's parsed spec and a learner's variant of it.
- ``dispatcher``: the one port through which work reaches graders; ``leases``: the claims jobs hold on rows.
- ``models``: the tables. ``platform``: the database, migrations, rate limits, news, markdown, highlighting,
  queue names, UTC times, CSV safety.
``app.domain`` uses ``worker`` (core, bank, grading) and never ``app.jobs`` or ``app.web``. Functions that take a
session take it keyword-only and never commit: the caller commits.
"""
