"""Grading on the host: the pipeline (``pipeline.grade``), job directory, devices, sandbox backends, boot scripts."""
