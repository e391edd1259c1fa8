"""Exercises: the bank in the database and how instructors change it.

Contract, by module:
- ``bank``: syncing the exercise folders into versions (and the bank's ``path.toml``), the published catalogue.
- ``learning_path``: the synced learning path over the published exercises, and a learner's standing per module.
- ``authoring``: drafts made in the browser or uploaded, validated, published (a new current version re-scores
  staff grades through ``app.domain.results.settle.version_changed``).
- ``checks``: an instructor's check of a version (solutions pass, wrong variants fail), run as a leased job.
- ``example_runs``: running a learner's code against the visible examples, at once and without a submission.
- ``notebooks``: an exercise as a Jupyter notebook, and the tagged solution cells read back from one.
- ``demand``: the published exercises in the order learners are about to submit them (open assignments first,
  then by recent submissions): the order warm grading starts in.
"""
