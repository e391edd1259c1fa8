"""Probes for torch-allreduce-grads: run the learner's code in real rank processes (runner.vdev.ddp, gloo on the
CPU) and report what came back, as data. Observations only; the hidden tests compute what is right.

- run_average: every rank builds grad_model(), fills its gradients with rank-dependent values, calls the
  learner's average_gradients(model, world_size) and returns the gradients afterwards.
- run_train: runs the learner's train(rank, world_size) and returns its state_dict plus how many
  DistributedDataParallel objects were constructed in the rank. Before train, every rank's global random
  generator gets a seed of its own, as separate processes have (forked ranks would otherwise share one state).

Each result also carries "seen": what the rank did, in order, as a list of events (also for a rank that raised or
was stopped; [] when it wrote none). Each rank appends them to a file of its own as they happen:
  {"e": "init_pg", "backend"}            dist.init_process_group was called
  {"e": "destroy"}                       dist.destroy_process_group was called
  {"e": "init", "layer", "weight", "bias"}   a Linear(4, 8) ("0") or Linear(8, 1) ("2") at its first forward
  {"e": "fwd", "rows", "grad"}           the input rows of a Linear(4, 8) (grad: autograd was recording)
  {"e": "loss", "input", "target", "reduction", "values", "grad"}   an mse_loss call: shapes, reduction, targets
  {"e": "bwd", "stale"}                  a backward pass (stale: a layer seen in a forward still had a non-zero
                                         .grad before it)
  {"e": "avg", "grads", "nonzero", "params"} / {"e": "avg_end"}   the learner's average_gradients was entered / left
  {"e": "coll", "op", "n", "avg"}        a collective of the process group (op: allreduce, reduce, allgather, ...;
                                         n: values this rank sent; avg: inside average_gradients)
  {"e": "api", "op", "asynchronous", "avg"}   a dist.all_reduce call: its ReduceOp and async_op
  {"e": "wait", "avg"}                   the learner's code called .wait() on a collective's work
  {"e": "step", "opt", "lr", "momentum", "weight_decay"}   an optimizer step is about to run
  {"e": "raised", "frozen"}              (run_average) average_gradients raised; frozen: while one of its frames
                                         held the frozen parameter, whose .grad is None
  {"e": "returned", "type", ["key", "value"]}   (run_train) train returned something that is not a dict of tensors
                                         (key, value: the first entry that is not a tensor, and its type)
The hidden tests import make_data, make_model, grad_model and rank_grad from here to compute their references.
"""

import contextlib
import inspect
import json
import os
import tempfile
from collections.abc import Mapping

import torch

# Warm the subject before it forks per-test children, so ranks start in ~0.1 s instead of seconds.
import torch._dynamo
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)

PREFIX = "__probe__."
FROZEN = "4.bias"  # grad_model()'s frozen parameter
MAX_EVENTS = 5000
# Each rank's own seed for the global generator before train: separate processes start from different random
# states, and a rank that builds its model without torch.manual_seed(0) first must not match the other by luck.
RANK_SEEDS = (982_451_653, 735_632_791, 179_424_673, 553_105_243)


def make_data() -> tuple[torch.Tensor, torch.Tensor]:
    """The 64 samples of the prompt."""
    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(1234))
    return x, x @ torch.tensor([[1.0, -2.0, 0.5, 3.0]]).T + 0.5


def make_model() -> nn.Module:
    """The prompt's model, seeded as the prompt says."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))


def grad_model() -> nn.Module:
    """A small model for run_average: three layers; the last layer's bias is frozen (its .grad stays None)."""
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    model[4].bias.requires_grad_(False)
    return model


def rank_grad(rank: int, index: int, shape) -> torch.Tensor:
    """The gradient rank `rank` holds for its `index`-th trainable parameter before averaging."""
    n = 1
    for s in shape:
        n *= s
    return (torch.arange(n, dtype=torch.float32).reshape(shape) * (rank + 1) + 10.0 * index * rank).contiguous()


_seen = {"ddp": 0}
_log: dict = {"fd": None, "n": 0, "in_avg": 0, "sync": 0, "layers": [], "firsts": set()}


def _add(**event) -> None:
    """Append one event to this rank's file (written at once: it survives the rank being killed)."""
    fd = _log["fd"]
    if fd is None or _log["n"] >= MAX_EVENTS:
        return
    _log["n"] += 1
    with contextlib.suppress(OSError, TypeError, ValueError):
        os.write(fd, (json.dumps(event) + "\n").encode())


def _open(folder: str, rank: int) -> None:
    path = os.path.join(folder, f"rank{rank}.jsonl")
    _log.update(fd=os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), n=0, in_avg=0, layers=[], firsts=set())


def _read(folder: str, rank: int) -> list:
    events = []
    try:
        with open(os.path.join(folder, f"rank{rank}.jsonl")) as f:
            for line in f:
                try:
                    events.append(json.loads(line))
                except ValueError:
                    break  # a line cut short by a kill
    except OSError:
        pass
    return events


def _values(t, limit: int = 64):
    if not isinstance(t, torch.Tensor) or t.numel() > limit:
        return None
    return t.detach().double().reshape(-1).tolist()


def _numel(value) -> int:
    if isinstance(value, torch.Tensor):
        return int(value.numel())
    if isinstance(value, (list, tuple)):
        return sum(_numel(v) for v in value)
    return 0


def _op_name(op) -> str:
    name = getattr(op, "name", None)
    return str(name) if name else str(op).rsplit(".", 1)[-1]


_SENT_SECOND = {
    "allgather",
    "allgather_coalesced",
    "_allgather_base",
    "all_gather_single",
    "reduce_scatter",
    "_reduce_scatter_base",
    "reduce_scatter_single",
    "gather",
    "alltoall",
    "alltoall_base",
}
_COLLECTIVES = (
    "allreduce",
    "allreduce_coalesced",
    "reduce",
    "broadcast",
    "allgather",
    "allgather_coalesced",
    "_allgather_base",
    "all_gather_single",
    "allgather_into_tensor_coalesced",
    "reduce_scatter",
    "_reduce_scatter_base",
    "reduce_scatter_single",
    "gather",
    "scatter",
    "alltoall",
    "alltoall_base",
    "barrier",
    "send",
    "recv",
)


def _install() -> None:
    """Record, in this rank, what the learner's code does (see the module's docstring for the events)."""
    import torch.distributed.distributed_c10d as c10d
    import torch.nn.functional as F
    from torch._C._distributed_c10d import ProcessGroup, Work
    from torch.nn.modules.module import register_module_forward_pre_hook
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    if getattr(ProcessGroup.allreduce, "_gpulab_seen", False):
        return  # already installed in this process

    for op in _COLLECTIVES:
        original = getattr(ProcessGroup, op, None)
        if original is None:
            continue

        def collective(self, *args, _op=op, _original=original, **kwargs):
            sent = args[1] if _op in _SENT_SECOND and len(args) > 1 else (args[0] if args else None)
            _add(e="coll", op=_op, n=_numel(sent), avg=_log["in_avg"] > 0)
            return _original(self, *args, **kwargs)

        collective._gpulab_seen = True
        setattr(ProcessGroup, op, collective)

    all_reduce = c10d.all_reduce

    def seen_all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        _add(e="api", op=_op_name(op), asynchronous=bool(async_op), avg=_log["in_avg"] > 0)
        _log["sync"] += not async_op  # the wait inside a blocking all_reduce is torch's, not the learner's
        try:
            return all_reduce(tensor, op=op, group=group, async_op=async_op)
        finally:
            _log["sync"] -= not async_op

    wait = Work.wait

    def seen_wait(self, *args, **kwargs):
        if not _log["sync"]:
            _add(e="wait", avg=_log["in_avg"] > 0)
        return wait(self, *args, **kwargs)

    Work.wait = seen_wait

    init, destroy = c10d.init_process_group, c10d.destroy_process_group

    def seen_init(*args, **kwargs):
        backend = kwargs.get("backend", args[0] if args else None)
        _add(e="init_pg", backend=str(backend))
        return init(*args, **kwargs)

    def seen_destroy(*args, **kwargs):
        _add(e="destroy")
        return destroy(*args, **kwargs)

    for module in (dist, c10d):
        module.all_reduce, module.init_process_group, module.destroy_process_group = (
            seen_all_reduce,
            seen_init,
            seen_destroy,
        )

    def forward_pre(module, args):
        if not isinstance(module, nn.Linear):
            return None
        shape = (module.in_features, module.out_features)
        if shape not in ((4, 8), (8, 1)):
            return None
        if id(module) not in _log["firsts"]:
            _log["firsts"].add(id(module))
            _log["layers"].append(module)
            _add(
                e="init",
                layer="0" if shape == (4, 8) else "2",
                weight=_values(module.weight),
                bias=_values(module.bias) if module.bias is not None else None,
            )
        if shape == (4, 8):
            x = args[0] if args else None
            rows = None
            if isinstance(x, torch.Tensor) and x.dim() == 2 and x.shape[1] == 4 and x.shape[0] <= 64:
                rows = x.detach().double().tolist()
            _add(e="fwd", rows=rows, grad=torch.is_grad_enabled())
        return None

    register_module_forward_pre_hook(forward_pre)

    backward = torch.autograd.backward

    def seen_backward(*args, **kwargs):
        stale = False
        with contextlib.suppress(Exception):
            stale = any(
                p.grad is not None and bool(p.grad.detach().abs().sum() > 0)
                for layer in _log["layers"]
                for p in layer.parameters()
            )
        _add(e="bwd", stale=stale)
        return backward(*args, **kwargs)

    torch.autograd.backward = seen_backward

    mse_loss = F.mse_loss
    signature = inspect.signature(mse_loss)

    def seen_mse_loss(input, target, *args, **kwargs):
        try:
            given = signature.bind(input, target, *args, **kwargs).arguments
            reduction = str(given.get("reduction", "mean"))
            if given.get("size_average") is not None or given.get("reduce") is not None:
                reduction = "legacy"  # size_average/reduce given: torch picks the reduction from them
        except TypeError:
            reduction = "unknown"
        _add(
            e="loss",
            input=list(input.shape) if isinstance(input, torch.Tensor) else None,
            target=list(target.shape) if isinstance(target, torch.Tensor) else None,
            reduction=reduction,
            values=_values(target),
            grad=torch.is_grad_enabled(),
        )
        return mse_loss(input, target, *args, **kwargs)

    F.mse_loss = seen_mse_loss

    def before_step(optimizer, args, kwargs):
        group = optimizer.param_groups[0] if optimizer.param_groups else {}

        def number(key):
            try:
                return float(group.get(key, 0.0))
            except (TypeError, ValueError):
                return None

        _add(
            e="step",
            opt=type(optimizer).__name__,
            lr=number("lr"),
            momentum=number("momentum"),
            weight_decay=number("weight_decay"),
        )

    register_optimizer_step_pre_hook(before_step)


def _watch_average(submission) -> None:
    """Wrap the learner's average_gradients (as train looks it up) to record when it runs and what it finds."""
    original = getattr(submission, "average_gradients", None)
    if not callable(original):
        return

    def average_gradients(model, *args, **kwargs):
        try:
            params = list(model.parameters())
            grads = [p.grad for p in params if p.grad is not None]
            nonzero = sum(bool(g.detach().abs().sum() > 0) for g in grads)
            _add(e="avg", grads=len(grads), nonzero=nonzero, params=len(params))
        except Exception:
            _add(e="avg", grads=None, nonzero=None, params=None)
        _log["in_avg"] += 1
        try:
            return original(model, *args, **kwargs)
        finally:
            _log["in_avg"] -= 1
            _add(e="avg_end")

    submission.average_gradients = average_gradients


def _holds(exc: BaseException, target) -> bool:
    """Return whether a frame of the traceback (the learner's code) held ``target`` in a local variable."""
    tb = exc.__traceback__
    while tb is not None:
        with contextlib.suppress(Exception):
            frame = tb.tb_frame
            if frame.f_code.co_filename != __file__ and any(value is target for value in frame.f_locals.values()):
                return True
        tb = tb.tb_next
    return False


def _instrument() -> None:
    original = DistributedDataParallel.__init__
    if getattr(original, "_gpulab_probe", False):
        return

    def init(self, *args, **kwargs):
        _seen["ddp"] += 1
        return original(self, *args, **kwargs)

    init._gpulab_probe = True
    DistributedDataParallel.__init__ = init


def _with_seen(runs, folder: str) -> list:
    out = []
    for r in runs:
        plain = r.plain()
        plain["seen"] = _read(folder, r.rank)
        out.append(plain)
    return out


def run_average(submission, world_size: int = 2, timeout_s: float = 40.0) -> list:
    """Each rank: init gloo, set rank-dependent grads, call average_gradients, return the grads afterwards."""
    from runner.vdev import ddp

    folder = tempfile.mkdtemp(prefix="allreduce-avg-")

    def rank_fn(rank: int, ws: int):
        dist.init_process_group("gloo", rank=rank, world_size=ws)
        model = grad_model()
        trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        for i, (_, p) in enumerate(trainable):
            p.grad = rank_grad(rank, i, tuple(p.shape))
        _open(folder, rank)
        _install()
        _log["in_avg"] = 1
        try:
            result = submission.average_gradients(model, ws)
        except BaseException as exc:
            _add(e="raised", frozen=_holds(exc, model[4].bias))
            raise
        finally:
            _log["in_avg"] = 0
        out = {}
        for name, p in model.named_parameters():
            if p.grad is not None:
                out[name] = p.grad.detach().clone()
        out[PREFIX + "returned_none"] = torch.tensor(result is None)
        dist.destroy_process_group()
        return out

    return _with_seen(ddp.run(rank_fn, world_size=world_size, timeout_s=timeout_s), folder)


def run_train(submission, world_size: int = 2, timeout_s: float = 40.0) -> list:
    """Run submission.train on world_size ranks; return each rank's RankResult.plain() with observations."""
    from runner.vdev import ddp

    _instrument()
    folder = tempfile.mkdtemp(prefix="allreduce-train-")

    def rank_fn(rank: int, ws: int):
        _open(folder, rank)
        _install()
        _watch_average(submission)
        torch.manual_seed(RANK_SEEDS[rank % len(RANK_SEEDS)])
        state = submission.train(rank, ws)
        if not isinstance(state, Mapping):
            _add(e="returned", type=type(state).__name__)  # the tests tell; the harness would only say "raised"
            return {PREFIX + "bad_return": torch.tensor(1)}
        for key, value in state.items():
            if not isinstance(value, torch.Tensor):
                _add(e="returned", type=type(state).__name__, key=str(key)[:80], value=type(value).__name__)
                return {PREFIX + "bad_return": torch.tensor(1)}
        return {**dict(state), PREFIX + "ddp": torch.tensor(_seen["ddp"])}

    return _with_seen(ddp.run(rank_fn, world_size=world_size, timeout_s=timeout_s), folder)
