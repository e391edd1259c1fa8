"""Infrastructure every context stands on; nothing here knows a table or a rule of the platform.

Contract, by module:
- ``db``: engines and sessions (``session_scope``), SQLite and PostgreSQL alike.
- ``migrate``: Alembic ``upgrade`` to head, at start-up and in tests.
- ``ratelimit``: token-bucket limits, in process or on Redis shared by every process.
- ``news``: "this submission changed" wake-ups for live streams, across processes over Redis.
- ``markdown`` and ``highlight``: prompts rendered to sanitised HTML, code blocks coloured.
- ``queues``: the grading queue names and their lanes.
- ``clock``: times aware in UTC both ways (``as_utc``, ``UtcDatetime``).
- ``csvsafe``: CSV cells a spreadsheet will not run as formulas.
"""
