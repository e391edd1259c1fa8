"""Probes for torch-elastic-resume: launch the learner's script with torchrun, kill rank 1 once, report what happened.

`launch` runs the real torchrun (`python -m torch.distributed.run`, what the `torchrun` command runs) with
`--standalone --nproc-per-node 2 --max-restarts 1` on this very file, which torchrun starts as each worker: as a
script, it is the **worker harness**. The harness installs observers, then runs the learner's script with `runpy`
as `__main__`, with the script's own arguments (`--ckpt-dir`, `--out`). It writes one JSON line per event to a
log file of its own (rank, restart) as it happens, so a killed worker's log ends where it died:

- `start` (pid, TORCHELASTIC_RESTART_COUNT, world size), `step` (every optimizer step, counted by a global
  optimizer step hook), `killed` (the harness SIGKILLs its own process after step `kill_step` on `kill_rank`
  in the first attempt: a worker killed from outside, as a preempted machine would be);
- `save`/`load` (the path of every `torch.save`/`torch.load`), `rename` (every `os.replace`/`os.rename`, which
  `Path.replace`, `Path.rename` and `shutil.move` call), `optimizer_load` (`Optimizer.load_state_dict`),
  `model_load` (the first keys of every `Module.load_state_dict`), `set_epoch` (every `DistributedSampler`
  epoch, with the sampler's seed, shuffle, num_replicas, rank), `loader` (every `DataLoader`'s batch size and
  sampler), `optimizer` (each optimizer's class and settings, at its first step), `zero_grad` (the first
  `zero_grad()` of an optimizer or a module), `wrap` (the parameters of each module wrapped in
  `DistributedDataParallel`, as they were just before the wrap), `collective` (each `torch.distributed` collective the script
  calls itself, before it runs: a worker whose log ends on one was waiting in it);
- `error` (the exception that ended the script: type, message, the line in the learner's script), `end`.

Observations, forgeable by a learner who patches this file like every probe; the tests also grade what cannot be
forged without resuming correctly (the final weights and the restart torchrun made). The hidden tests import
`dataset` and the numbers from here to compute the uninterrupted run themselves.
"""

import json
import os
import sys

import torch

N, BATCH, EPOCHS, LR, MOMENTUM, WORLD = 64, 8, 6, 0.05, 0.9, 2
STEPS_PER_EPOCH = N // (BATCH * WORLD)
TRUE_W = torch.tensor([[1.0, -2.0, 0.5, 3.0]])
TRUE_B = 0.5
LOG_ENV, KILL_ENV, DEADLINE_ENV = "GPULAB_ELASTIC_LOG", "GPULAB_ELASTIC_KILL", "GPULAB_ELASTIC_DEADLINE"
# The collectives a script may call itself (DDP's own gradient all-reduce is not among them: it runs in C++).
COLLECTIVES = (
    "barrier", "all_reduce", "broadcast", "broadcast_object_list", "all_gather", "all_gather_object", "reduce",
    "gather", "scatter", "all_to_all", "reduce_scatter", "gather_object", "scatter_object_list",
)  # fmt: skip


def dataset() -> tuple[torch.Tensor, torch.Tensor]:
    """The 64 samples of the prompt: x ~ N(0, 1) from seed 1234, y = x @ [1, -2, 0.5, 3] + 0.5."""
    x = torch.randn(N, 4, generator=torch.Generator().manual_seed(1234))
    return x, x @ TRUE_W.T + TRUE_B


# --- the worker harness (this file run as a script by torchrun) ---------------------------------------------


def _worker(argv: list[str]) -> None:
    """Observe and run the learner's script `argv[0]` with its arguments `argv[1:]`; exit as it did."""
    import runpy
    import signal
    import threading
    import time
    import traceback

    from torch.optim.optimizer import register_optimizer_step_post_hook
    from torch.utils.data import DistributedSampler

    script = argv[0]
    rank = int(os.environ.get("RANK", "-1"))
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "-1"))
    kill_rank, kill_step = (int(v) for v in os.environ.get(KILL_ENV, "-1:-1").split(":"))
    path = os.path.join(os.environ[LOG_ENV], f"rank{rank}-attempt{attempt}.jsonl")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def event(kind: str, **data) -> None:
        os.write(fd, (json.dumps({"event": kind, **data}) + "\n").encode())

    event("start", pid=os.getpid(), world=os.environ.get("WORLD_SIZE"))

    # A worker past the grader's deadline leaves by itself: torchrun's workers run in sessions of their own.
    deadline = float(os.environ.get(DEADLINE_ENV, "0"))
    if deadline:

        def watchdog() -> None:
            time.sleep(max(0.0, deadline - time.time()))
            event("timed_out")
            os._exit(124)

        threading.Thread(target=watchdog, daemon=True).start()

    steps = 0
    optimizers_seen: set[int] = set()

    def on_step(optimizer, args, kwargs) -> None:
        nonlocal steps
        steps += 1
        if id(optimizer) not in optimizers_seen:
            optimizers_seen.add(id(optimizer))
            group = optimizer.param_groups[0] if optimizer.param_groups else {}
            settings = {k: group[k] for k in ("lr", "momentum", "dampening", "weight_decay", "nesterov") if k in group}
            event(
                "optimizer",
                type=type(optimizer).__name__,
                groups=len(optimizer.param_groups),
                **{k: v if isinstance(v, (bool, int, float)) else str(v) for k, v in settings.items()},
            )
        event("step", n=steps)
        if attempt == 0 and rank == kill_rank and steps == kill_step:
            event("killed", step=steps)
            os.kill(os.getpid(), signal.SIGKILL)

    register_optimizer_step_post_hook(on_step)

    def where(f) -> str:
        if isinstance(f, (str, os.PathLike)):
            return os.path.abspath(os.fspath(f))
        name = getattr(f, "name", None)
        return os.path.abspath(name) if isinstance(name, str) else type(f).__name__

    save, load = torch.save, torch.load

    def observed_save(obj, f, *args, **kwargs):
        event("save", path=where(f))
        return save(obj, f, *args, **kwargs)

    def observed_load(f, *args, **kwargs):
        event("load", path=where(f))
        return load(f, *args, **kwargs)

    torch.save, torch.load = observed_save, observed_load

    optimizer_load = torch.optim.Optimizer.load_state_dict

    def observed_optimizer_load(self, state_dict):
        event("optimizer_load", optimizer=type(self).__name__)
        return optimizer_load(self, state_dict)

    torch.optim.Optimizer.load_state_dict = observed_optimizer_load

    module_load = torch.nn.Module.load_state_dict

    def observed_module_load(self, state_dict, *args, **kwargs):
        keys = [str(k) for k in list(state_dict)[:4]] if hasattr(state_dict, "keys") else []
        event("model_load", module=type(self).__name__, keys=keys)
        return module_load(self, state_dict, *args, **kwargs)

    torch.nn.Module.load_state_dict = observed_module_load

    set_epoch = DistributedSampler.set_epoch

    def observed_set_epoch(self, epoch):
        event(
            "set_epoch", epoch=int(epoch), seed=int(self.seed), shuffle=bool(self.shuffle),
            num_replicas=int(self.num_replicas), rank=int(self.rank), drop_last=bool(self.drop_last),
        )  # fmt: skip
        return set_epoch(self, epoch)

    DistributedSampler.set_epoch = observed_set_epoch

    loader_init = torch.utils.data.DataLoader.__init__

    def observed_loader_init(self, *args, **kwargs):
        loader_init(self, *args, **kwargs)
        event("loader", batch_size=self.batch_size, sampler=type(self.sampler).__name__)

    torch.utils.data.DataLoader.__init__ = observed_loader_init

    cleared = False

    def observed_zero_grad(original):
        def zero_grad(self, *args, **kwargs):
            nonlocal cleared
            if not cleared:
                cleared = True
                event("zero_grad", of=type(self).__name__)
            return original(self, *args, **kwargs)

        return zero_grad

    torch.optim.Optimizer.zero_grad = observed_zero_grad(torch.optim.Optimizer.zero_grad)
    torch.nn.Module.zero_grad = observed_zero_grad(torch.nn.Module.zero_grad)

    def observed_rename(original):
        def rename(src, dst, *args, **kwargs):
            result = original(src, dst, *args, **kwargs)
            event("rename", src=where(src), dst=where(dst))
            return result

        return rename

    os.replace, os.rename = observed_rename(os.replace), observed_rename(os.rename)

    import torch.distributed as dist

    called: dict[str, int] = {}

    def observed_collective(name, original):
        def collective(*args, **kwargs):
            called[name] = called.get(name, 0) + 1
            event("collective", name=name, n=called[name])
            return original(*args, **kwargs)

        return collective

    for name in COLLECTIVES:
        if callable(getattr(dist, name, None)):
            setattr(dist, name, observed_collective(name, getattr(dist, name)))

    ddp_init = torch.nn.parallel.DistributedDataParallel.__init__

    def observed_ddp_init(self, *args, **kwargs):
        module = args[0] if args else kwargs.get("module")
        try:
            values = [float(v) for p in list(module.parameters())[:4] for v in p.detach().flatten()[:16].tolist()]
        except Exception:  # not a module with float parameters: nothing to report
            values = []
        event("wrap", module=type(module).__name__, params=values[:32])
        return ddp_init(self, *args, **kwargs)

    torch.nn.parallel.DistributedDataParallel.__init__ = observed_ddp_init

    _teardown_safe()
    sys.argv = [script, *argv[1:]]
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if code:
            event("error", type="SystemExit", message=str(exc.code)[:300], line=None)
        else:
            event("end")
        _leave(code)
    except BaseException as exc:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if os.path.abspath(f.filename) == script]
        event("error", type=type(exc).__name__, message=str(exc)[:1500], line=frames[-1].lineno if frames else None)
        traceback.print_exc()
        _leave(1)
    event("end")
    _leave(0)


_KEPT: list = []


def _teardown_safe() -> None:
    """Avoid torch 2.13's teardown deadlocks on gloo (worker/runner/vdev/ddp.py has the whole story).

    Backward stashes a Python object in C++ thread-local state that gloo's worker thread may free while the main
    thread, holding the GIL, waits for it (a hang when the DDP wrapper is freed); and freeing a wrapper while the
    other rank is still in a collective can hang in the destructors. Neither changes what training computes: the
    stash is a no-op here, wrappers stay referenced and the worker leaves with os._exit.
    """
    c = torch._C
    if hasattr(c, "_stash_obj_in_tls") and hasattr(c, "_remove_obj_from_tls"):
        c._stash_obj_in_tls = lambda *args, **kwargs: None
        c._remove_obj_from_tls = lambda *args, **kwargs: None
    ddp = torch.nn.parallel.DistributedDataParallel
    original = ddp.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        _KEPT.append(self)

    ddp.__init__ = init


def _leave(code: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


# --- the probe (in the grader's subject process) -----------------------------------------------------------


def _read_logs(log_dir: str) -> list[dict]:
    runs = []
    for name in sorted(os.listdir(log_dir)):
        rank, attempt = name.removesuffix(".jsonl").removeprefix("rank").split("-attempt")
        events = []
        with open(os.path.join(log_dir, name), encoding="utf-8") as f:
            for line in f:
                try:
                    events.append(json.loads(line))
                except ValueError:
                    break  # a line cut short by the kill
        runs.append({"rank": int(rank), "attempt": int(attempt), "events": events[:1000]})
    return runs


def launch(submission, kill_rank: int = 1, kill_step: int = 14, max_restarts: int = 1, timeout_s: float = 420.0):
    """Run the learner's script under torchrun with one kill; return torchrun's exit code, the logs, the weights.

    torchrun's agent runs here, in this process: `torch.distributed.run.main(argv)` is what the `torchrun` command
    calls, and torch is already imported here (a fresh interpreter would import it again, seconds of CPU). The
    agent starts the workers as new processes, `python -u probes.py SCRIPT ARGS`, as the command would.
    """
    import signal
    import tempfile
    import threading
    import time

    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun

    script = os.path.abspath(submission.__file__)
    work = tempfile.mkdtemp(prefix="elastic-")
    ckpt_dir, log_dir, out = (os.path.join(work, name) for name in ("ckpt", "log", "final.pt"))
    os.mkdir(ckpt_dir)
    os.mkdir(log_dir)
    os.environ.update({
        # torch 2.13's torchrun keeps one store for all its restarts, and a restarted gloo group can read the dead
        # workers' addresses from it and never connect (exercises/FACTS.md, P40): a fresh store every restart.
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
        LOG_ENV: log_dir,
        KILL_ENV: f"{kill_rank}:{kill_step}",
        DEADLINE_ENV: str(time.time() + timeout_s),
    })  # fmt: skip
    argv = [
        "--standalone", "--nproc-per-node", str(WORLD), "--max-restarts", str(max_restarts),
        # The sandbox's hostname has no address; without this the workers cannot reach the agent's store.
        "--local-addr", "127.0.0.1",
        os.path.abspath(__file__), script, "--ckpt-dir", ckpt_dir, "--out", out,
    ]  # fmt: skip
    # Past the deadline, stop the agent as a terminal would: it stops its workers and raises SignalException.
    timer = threading.Timer(timeout_s + 10, os.kill, (os.getpid(), signal.SIGTERM))
    timer.daemon = True
    started = time.monotonic()
    code, timed_out = 0, False
    timer.start()
    try:
        torchrun(argv)
    except ChildFailedError:
        code = 1
    except SignalException:
        code, timed_out = None, True
    finally:
        timer.cancel()
    seconds = time.monotonic() - started
    timed_out = timed_out or any(_of_kind(r, "timed_out") for r in _read_logs(log_dir))
    final, final_error = None, ""
    if os.path.exists(out):
        try:
            loaded = torch.load(out, weights_only=True)
            if isinstance(loaded, dict) and all(isinstance(v, torch.Tensor) for v in loaded.values()):
                final = {str(k): v for k, v in loaded.items()}
            else:
                final_error = f"it holds a {type(loaded).__name__}, not a state_dict of tensors"
        except Exception as exc:
            final_error = f"torch.load raised {type(exc).__name__}: {str(exc)[:300]}"
    return {
        "exit_code": code,
        "timed_out": timed_out,
        "seconds": seconds,
        "runs": _read_logs(log_dir),
        "final": final,
        "final_exists": os.path.exists(out),
        "final_error": final_error,
        "ckpt_files": sorted(os.listdir(ckpt_dir))[:20],
        "ckpt_dir": ckpt_dir,
        "out": out,
    }


def _of_kind(run: dict, kind: str) -> list[dict]:
    return [e for e in run["events"] if e["event"] == kind]


if __name__ == "__main__":
    _worker(sys.argv[1:])
