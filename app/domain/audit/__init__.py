"""The audit trail: who changed a grade, a learner's conditions, a role, a course or a site setting, and when.

Contract, by module:
- ``trail``: ``record`` (called by the context that makes the change, in the change's own transaction, so an
  entry exists exactly when its change was committed), the ``Action`` names, ``Filters``, ``entries`` (newest
  first, people shown by name or as "erased user") and ``entries_csv``.
Entries are append-only: nothing here updates or deletes one, and the database refuses it (migration 0024).
Who may read which entries is decided by ``app.domain.courses.policy.may_read_audit``: admins all, a course's
staff their course's. ``audit`` sits under every context that records (it imports only the models).
"""
