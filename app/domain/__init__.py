"""The platform's records and rules: database, models, accounts, the bank in the database, submissions, statistics.

Imports go down only: ``app.domain`` uses ``worker`` (core, bank, grading) and never ``app.jobs`` or ``app.web``
(``pyproject.toml``'s import-linter contracts, ``docs/architecture.md``).
"""
