"""Counted results: where a grading, a quiz attempt, a staff grade or a gradebook change lands.

Contract, by module:
- ``staff_grades``: the records of staff grading (rubrics, the grades a submission waits for, putting released
  points into a submission, re-scoring for a new version). Only ``settle`` writes through it.
- ``settle``: the one place a counted result lands: it opens staff grades, queues the learner's LMS score and
  publishes the submission's news after the commit. Grading jobs, quiz answers, staff grade releases, regrade
  adjustments, gradebook overrides and their reverts, and new exercise versions all call it.
"""
