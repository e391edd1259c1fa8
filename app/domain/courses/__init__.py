"""Courses: who belongs to which course, what they are assigned, and what their work counts for.

Contract, by module:
- ``membership``: courses, enrollment (one by one or CSV), course roles (``course_role``, ``STAFF``), the
  practice course.
- ``policy``: who may see, grade and release learners' work (staff rights per course; the practice course's staff
  list), and the ``WorkScope`` exercise-level lists narrow to.
- ``assignments``: the rules of an assignment (window, late credit, attempts, rate, what counts) and the counted
  result of a learner's item (overrides included).
- ``coursework``: staff actions on assignments and extensions, the gate every submission passes, how an
  assignment binds its learners' practice, the variant a page shows.
- ``gradebook``: every learner's counted results, overrides and their history, the CSV export (overrides land
  through ``app.domain.results.settle``).
- ``leaderboard``: an assignment's board of one measurement per opted-in exercise, pseudonyms for learners.
- ``visibility``: which of a learner's test results are shown now, and when the rest will be.
- ``drafts``: a learner's unsubmitted code or quiz answers per item, saved as they work (never an attempt).
"""
