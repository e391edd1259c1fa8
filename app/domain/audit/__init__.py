"""The audit trail: who changed a grade, a learner's conditions, a role, a course or a site setting, and when.

Contract, by module:
- ``trail``: ``record`` (called by the context that makes the change, in the change's own transaction, so an
  entry exists exactly when its change was committed), the ``Action`` names, ``Filters``, ``entries`` (newest
  first, people shown by name or as "erased user") and ``entries_csv``.
Entries are append-only: nothing here updates or deletes one, and the database refuses it (migration 0024).
Who reads which entries: admins all of them, a course's staff (instructors and TAs) their course's; the web side
holds the rule in its dependencies (``AdminDep``, ``CourseStaffDep``) like every other staff read. ``audit``
sits under every context that records (it imports only the models).
"""
