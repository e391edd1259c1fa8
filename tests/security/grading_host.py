"""The attack suite's ``grading-host`` backend: each attack is graded inside a container of the grading host.

Contract:
- ``grading_host(basetemp)`` starts one container of ``gpulab/grading-host:cpu`` with exactly the privileges
  docker-compose.yml's ``worker-cpu`` holds (read from the file: ``cap_add``, ``security_opt``, ``init``; no
  network here either) and the pytest base folder and the temp folder bound at their own paths, so job folders
  the host side writes are the container's too. In it, one server process (``SERVER``, run by the image's own
  code: nothing of this checkout) keeps a ``WarmLocalSandbox`` whose pool serves ``python``, as a worker of the
  shipped deployment does, and grades each job it is sent. ``GradingHostSandbox.run`` sends ``(job_dir,
  limits)`` and returns the ``SandboxRun`` (``PlatformError``/``SandboxUnavailable`` come back as themselves);
  ``leftovers()`` lists, inside the container, live processes of the sandbox users, job cgroups and staging
  folders.
- ``grading_host(basetemp, gpu=True)``: the GPU grading host, with compose's ``worker-gpu`` privileges and two
  stand-in GPUs (the CPU image stands in for the GPU one: the sandbox is the same code); each job leases one.
- Without an engine or the image: skipped with the reason, unless ``GPULAB_REQUIRE_DOCKER=1`` (a failure).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

import pytest
import yaml

from worker.bank.specdata import Limits
from worker.core.config import REPO_ROOT
from worker.core.errors import PlatformError, SandboxUnavailable
from worker.grading.sandbox.base import SandboxRun

IMAGE = "gpulab/grading-host:cpu"
CGROUP_NAME = "gpulab-security"
REPLY_TIMEOUT_S = 300.0

# Runs in the container with the image's Python and code; one JSON request per line in, one reply per line out.
SERVER = r"""
import base64, dataclasses, glob, json, os, pwd, sys, tempfile
from pathlib import Path
from worker.bank.specdata import Limits
from worker.grading.sandbox.warm import WarmLocalSandbox, WarmPool

stage_root = Path(tempfile.mkdtemp(prefix="gpulab-security-stage-"))
stage_root.chmod(0o711)
pool = WarmPool(("python",), size=1)
gpus = json.loads(sys.argv[2]) if len(sys.argv) > 2 else None  # the GPU host: its slots over stand-in nodes
options = {}
if gpus:
    from worker.grading.sandbox.gpus import GpuSlots
    options = {"gpu_slots": GpuSlots(tuple(gpus["ids"]), 1, stage_root.parent / "gpu-locks"),
               "dev_root": Path(gpus["dev"]), "proc_root": Path(gpus["proc"])}
sandbox = WarmLocalSandbox(pool=pool, cgroup_name=sys.argv[1], timeout_margin_s=1.0, stage_root=stage_root,
                           **options)
sandbox.check()
uids = {pwd.getpwnam(u).pw_uid for u in ("gpulab-sandbox", "gpulab-judge")}

def leftovers():
    live = []
    for status in glob.glob("/proc/[0-9]*/status"):
        try:
            lines = dict(l.split(":", 1) for l in open(status).read().splitlines() if ":" in l)
        except OSError:
            continue
        if int(lines.get("Uid", "-1 ").split()[0]) in uids:
            live.append(status.split("/")[2] + " " + lines.get("Name", "").strip())
    groups = [p for p in glob.glob(f"/sys/fs/cgroup/*/{sys.argv[1]}/*") if os.path.isdir(p)]
    return {"processes": live, "cgroups": groups, "stages": [p.name for p in stage_root.iterdir()]}

print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    request = json.loads(line)
    try:
        if request["op"] == "leftovers":
            reply = leftovers()
        else:
            run = sandbox.run(Path(request["job_dir"]), Limits(**request["limits"]))
            reply = {k: base64.b64encode(v).decode() if isinstance(v, bytes) else v
                     for k, v in dataclasses.asdict(run).items()}
    except Exception as exc:
        reply = {"error": type(exc).__name__, "message": str(exc)}
    print(json.dumps(reply), flush=True)
"""


def worker_cpu_options(service_name: str = "worker-cpu") -> list[str]:
    """Return docker-compose.yml's ``cap_add``, ``security_opt`` and ``init`` of a grading host as run options."""
    service = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())["services"][service_name]
    options = [f"--cap-add={cap}" for cap in service["cap_add"]]
    for option in service["security_opt"]:
        kind, _, value = option.partition("=")
        if kind == "seccomp":  # compose's default path, relative to the checkout
            value = str(REPO_ROOT / value.split(":-", 1)[-1].rstrip("}"))
        options.append(f"--security-opt={kind}={value}")
    return options + (["--init"] if service.get("init") else [])


class GradingHostSandbox:
    """A sandbox whose every run happens in the grading-host container (see the module contract)."""

    name = "grading-host"
    isolated = True

    def __init__(self, server: subprocess.Popen[str], name: str = "grading-host") -> None:
        self._server = server
        self.name = name
        self._lock = threading.Lock()

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        stdin, stdout = self._server.stdin, self._server.stdout
        assert stdin is not None and stdout is not None
        with self._lock:
            stdin.write(json.dumps(request) + "\n")
            stdin.flush()
            line = _read_line(stdout, REPLY_TIMEOUT_S)
        reply: dict[str, Any] = json.loads(line)
        errors = {"PlatformError": PlatformError, "SandboxUnavailable": SandboxUnavailable}
        if "error" in reply:
            raise errors.get(reply["error"], PlatformError)(f"{reply['error']}: {reply['message']}")
        return reply

    def check(self) -> None:
        """The server checked its sandbox when it started."""

    def run(self, job_dir: Path, limits: Limits) -> SandboxRun:
        """Grade ``job_dir`` in the container and return what its sandbox reported."""
        reply = self._ask({"op": "run", "job_dir": str(job_dir.resolve()), "limits": asdict(limits)})
        for key in ("stdout", "stderr", "judge_stderr"):
            reply[key] = base64.b64decode(reply[key])
        return SandboxRun(**reply)

    def leftovers(self) -> dict[str, list[str]]:
        """Return what the runs left in the container: sandbox users' processes, job cgroups, staging folders."""
        return self._ask({"op": "leftovers"})


def _read_line(stream: IO[str], timeout_s: float) -> str:
    """Return the next line of ``stream``; raise ``PlatformError`` when none comes in ``timeout_s`` (a hang)."""
    box: list[str] = []
    reader = threading.Thread(target=lambda: box.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout_s)
    if not box or not box[0]:
        raise PlatformError(f"the grading-host server gave no answer within {timeout_s:.0f} s (or it ended)")
    return box[0]


def _unavailable(reason: str) -> None:
    if os.environ.get("GPULAB_REQUIRE_DOCKER") == "1":
        pytest.fail(f"GPULAB_REQUIRE_DOCKER=1 but {reason}")
    pytest.skip(reason)


@contextmanager
def grading_host(basetemp: Path, *, gpu: bool = False) -> Iterator[GradingHostSandbox]:
    """Start the grading-host container and its server; remove the container afterwards.

    ``gpu``: the GPU grading host (compose's ``worker-gpu`` privileges) with two stand-in GPUs: each job leases
    one, and its sandbox gets that one's stand-in nodes (``GPU_STAND_INS``: a driver table and plain files, in
    a public folder below the temp folder, which the container shares).
    """
    try:
        found = subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        _unavailable(f"no Docker engine answers ({exc})")
    if found.returncode != 0:
        _unavailable(f"image {IMAGE} is not built (docker/build-images) or no engine answers")
    name = f"gpulab-security-{'gpu' if gpu else 'grading'}-host-{os.getpid()}"
    # Job folders are made below pytest's base folder or, by grade() without a work root, the temp folder.
    shared = {Path(tempfile.gettempdir()).resolve(), basetemp.resolve()}
    mounts = [arg for path in sorted(shared) for arg in ("-v", f"{path}:{path}")]
    options = worker_cpu_options("worker-gpu" if gpu else "worker-cpu")
    run = ["docker", "run", "-d", "--rm", "--name", name, "--network", "none", "--label", "gpulab.test=security",
           *options, *mounts, IMAGE, "sleep", "infinity"]  # fmt: skip
    stand_ins = _gpu_stand_ins() if gpu else None
    started = subprocess.run(run, capture_output=True, text=True, timeout=120)
    assert started.returncode == 0, f"the grading-host container did not start: {started.stderr}"
    server = None
    try:
        argv = [CGROUP_NAME] + ([json.dumps(stand_ins)] if stand_ins else [])
        server = subprocess.Popen(
            ["docker", "exec", "-i", name, "python", "-c", SERVER, *argv],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
        )  # fmt: skip
        assert server.stdout is not None
        ready = _read_line(server.stdout, REPLY_TIMEOUT_S)
        assert json.loads(ready) == {"ready": True}, ready
        yield GradingHostSandbox(server, name="gpu-host" if gpu else "grading-host")
    finally:
        if server is not None:
            server.kill()
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=120)
        if stand_ins:
            shutil.rmtree(stand_ins["root"], ignore_errors=True)


GPU_STAND_INS = {"0000:1a:00.0": ("GPU-aaaa0000-0000-4000-8000-000000000001", 0),
                 "0000:3b:00.0": ("GPU-bbbb0000-0000-4000-8000-000000000002", 1)}  # fmt: skip


def _gpu_stand_ins() -> dict[str, Any]:
    """Make two stand-in GPUs (a driver table and a /dev of plain files, readable by the sandbox users)."""
    root = Path(tempfile.mkdtemp(prefix="gpulab-security-gpus-"))
    proc, dev = root / "proc", root / "dev"
    for bus, (uuid, minor) in GPU_STAND_INS.items():
        info = proc / "driver" / "nvidia" / "gpus" / bus / "information"
        info.parent.mkdir(parents=True)
        info.write_text(
            f"Model: \t NVIDIA H100\nGPU UUID: \t {uuid}\nBus Location: \t {bus}\nDevice Minor: \t {minor}\n"
        )
    dev.mkdir()
    for node in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"):
        (dev / node).write_text(f"stand-in {node}")
    for path in (root, *root.rglob("*")):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return {"root": str(root), "ids": ["0", "1"], "dev": str(dev), "proc": str(proc)}
