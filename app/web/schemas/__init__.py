"""Request and response bodies of the JSON API, and the only code that turns rows into them.

Contract, by module:
- ``common``: the strict input base (unknown keys refused), e-mail fields (``format: email``; ``Email``, a new
  account's address, is checked and normalised by ``app.domain.accounts.passwords.check_email``; ``LoginEmail`` is
  not, so an account made under older rules can still log in), id references.
- ``auth``: signing in, the current account, API tokens.
- ``exercises``: the catalogue's summaries and what a learner reads of an exercise (an allow-list of its files).
- ``submissions``: submitting, and the result, progress and history returned (what a learner's visibility tiers
  withhold stays withheld).
- ``quiz``: quiz answers and their per-question results.
Every datetime is written in UTC with its offset (``app.domain.platform.clock.UtcDatetime``).
"""
