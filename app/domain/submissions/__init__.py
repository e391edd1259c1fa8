"""Submissions: a learner's attempt from the moment it is stored until it is graded, and what it adds up to.

Contract, by module:
- ``lifecycle``: create (the caller gates and commits, then dispatches), claim (the idempotency gate and fencing
  token), ``held`` for the lease holder, record the outcome or a platform failure, recover what was left.
- ``progress``: a learner's standing on an exercise and the diff between attempts.
- ``regrade``: staff regrades of an exercise's submissions against a version, and their history.
- ``quiz``: quiz attempts, graded at once and kept as ordinary submissions (landed by ``results.settle``).
"""
