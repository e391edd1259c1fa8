"""Operations: what admins watch.

Contract, by module:
- ``dashboard``: the grade matrix, timing percentiles, the grades CSV and the score chart.
- ``metrics``: the Prometheus metrics.
- ``liveness``: worker heartbeats, per-queue liveness, the stranded-work view.
"""
