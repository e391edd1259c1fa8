"""Jobs: how work that runs learner code travels from the web side to the grading side and back.

The dispatchers (``dispatch``), the Celery app and its tasks (gradings, example runs, instructor checks),
the lease keepers and process beats (``heartbeat``), the sweeper, a worker's start and stop
(``lifecycle``) and the prewarm of warm templates. Jobs read and write the database (``app.domain.models``) and
hand the grading side (``worker``) only what it must run: a spec and code, never a database row.
"""
