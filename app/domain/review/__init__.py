"""Review: what staff do with learners' work after it was graded.

Contract, by module:
- ``staff_grading``: the staff grading queues, saving a grade against its rubric, releasing grades (landed by
  ``app.domain.results.settle``).
- ``regrade_requests``: a learner asks staff to look again; the thread; comment, adjust, re-run, close.
- ``listing``: the staff list of submissions and its filters.
- ``similarity`` and ``similarity_runs``: copydetect fingerprints of an assignment's or exercise's work, run as a
  leased job; pairs for staff to read.
- ``insights``: what a class gets wrong, per test and per learner.
"""
