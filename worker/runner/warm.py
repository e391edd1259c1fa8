"""``python3 -m runner.warm CONFIG_JSON``: a grading container started before its job, for one job only.

Contract (the host side is ``worker/grading/sandbox/docker_warm.py``):
- ``CONFIG_JSON`` is ``{"role": "judge"|"subject", "job": "/job", "go": "/ctl/go", "preload": [...],
  "devices": {"framework", "replicas"}}``. Nothing in it comes from a job or a learner.
- First the process imports what its role needs before any job exists: the subject ``subject.warm(preload,
  devices)`` (the framework, the virtual devices), the judge ``warm_judge(preload)`` (the judge's modules,
  pytest and its plugins, and the framework hidden tests import). No job file is there yet and none is read.
  Then ``gc.freeze()``: the collector skips all of that from then on, as in a warm template's children.
- Then it opens ``go``, a FIFO the host made, for reading: that blocks, without using CPU, until the host
  opens it for writing, which is how the host knows this container is ready (a non-blocking open for writing
  succeeds only while a reader has it open). The host copies the job into ``/job`` and writes one line.
  ``go\\n`` runs the role exactly as ``python3 -m runner.judge /job`` / ``runner.subject /job`` would, with
  its exit code; anything else exits 0 at once. A writer that closes without a word (the host checking that
  the container is ready) changes nothing: the process opens the FIFO again and waits.
- One job per container: the process exits after it, and the host removes the container.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import sys
from typing import Any

GO = b"go\n"


def warm_judge(preload: list[str]) -> None:
    """Import what every judge run needs before it reads a job: the judge's modules, pytest and its plugins.

    A framework judge (``preload`` names torch or tensorflow) also imports the framework, as hidden tests and
    ``probes.py`` do, the same fork-safe way as a subject (``subject.warm`` with no devices: no op that starts
    threads or TensorFlow's runtime). Warm templates (``worker/grading/boot/template.py``) call it too.
    """
    import _pytest.config
    from runner import judge, subject  # noqa: F401 - judge brings runner.plugin, runner.client and pytest
    from runner.plugin import BLOCKED_PLUGINS

    for name in getattr(_pytest.config, "default_plugins", ()):
        if name not in BLOCKED_PLUGINS:
            with contextlib.suppress(ImportError):
                importlib.import_module(f"_pytest.{name}")
    # What pytest imports only once it runs (its argument completion; the faulthandler plugin's module).
    for name in ("_pytest._argcomplete", "faulthandler"):
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    subject.warm(preload, {"framework": "none", "replicas": 1})
    if "torch" in preload:
        from runner import vdev

        vdev.warm_torch()


def _wait_for_go(path: str) -> bool:
    """Block until the host writes to the FIFO at ``path``; say whether it said ``go``.

    A writer that closes without writing is the host checking that this container is ready: wait again.
    """
    while True:
        with open(path, "rb", buffering=0) as fifo:
            said = fifo.read(len(GO))
        if said:
            return said == GO


def main(argv: list[str]) -> int:
    """Warm up for the role in ``argv[1]``'s config, wait for the job, then run it."""
    config: dict[str, Any] = json.loads(argv[1])
    role = config["role"]
    preload = [str(p) for p in config.get("preload", [])]
    if role == "judge":
        warm_judge(preload)
    else:
        from runner import subject

        subject.warm(preload, config.get("devices") or {"framework": "none", "replicas": 1})
    # What was imported lives as long as the process: frozen, the collector never scans it again (in a torch
    # judge that is most of pytest's end-of-run collection), and forked test children never copy it by
    # collecting.
    gc.collect()
    gc.freeze()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    if not _wait_for_go(config["go"]):
        return 0
    job = str(config.get("job", "/job"))
    if role == "judge":
        from runner import judge

        return judge.main(["judge", job])
    from runner import subject

    return subject.main(["subject", job])


if __name__ == "__main__":
    code = main(sys.argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
