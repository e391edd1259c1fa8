"""The grading runner: the only gpulab code that runs inside the sandbox.

Contract: stdlib and pytest only; never imports ``app`` or ``worker``. Run as ``python -m runner JOB_DIR``
(``JOB_DIR`` defaults to ``/job``). See ``README.md`` next to this file for the job-directory contract.
"""

RESULT_VERSION = 1
JOB_VERSION = 1
