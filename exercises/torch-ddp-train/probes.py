"""Probes for torch-ddp-train: run the learner's train(rank, world_size) in real processes with real DDP over
gloo (runner.vdev.ddp) and report what each rank returned, plus what it did, as data.

Observations (forgeable by a learner who patches this file, like every probe; the tests also check results
that cannot be forged without training correctly), each rank's own:
- the rows of every batch that went through DistributedDataParallel.forward, in order (first 512 rows);
- how many DDP forwards and backward passes ran, and which backend the process group used;
- in how many backward passes the parameters' .grad already held values when the pass began (not cleared);
- for the first batches: the model's outputs and the gradient that reached them (what the loss asked for);
- the parameters as they were at the last DDP forward (the trained weights before anything after training);
- every DistributedSampler made: num_replicas, rank, seed, shuffle, how often it was iterated, its epoch then;
- over every pass through a shuffling DistributedSampler: how many passes, and how many different shuffles
  (seed + epoch, what it seeds its permutation with) they drew;
- how many nn.DataParallel forwards ran, how many optimizer steps and at which learning rate;
- how many optimizer steps found no gradient on any parameter they update (every .grad None or zero), and how
  many were taken by an optimizer that holds none of the DDP model's parameters;
- what train returned when it was not a dict of tensors;
- the rank's collectives in order (DDP's start-up broadcast, DDP's gradient all-reduce in each backward, the
  learner's own torch.distributed calls), streamed to a file as they happen, so a rank that hangs or is killed
  still reports them.
The hidden tests import `dataset` from here to know the data.
"""

import contextlib
import functools
import os
import shutil
import tempfile
from collections.abc import Mapping

import torch
import torch._dynamo  # warms the subject before it forks per-test children: ranks start in ~0.1 s, not seconds
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
from torch.utils.data import DistributedSampler

torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)

TRUE_W = torch.tensor([[1.0, -2.0, 0.5, 3.0]])
TRUE_B = 0.5
MAX_ROWS = 512
FIT_FORWARDS = 32  # forwards whose outputs and output gradients are kept
MAX_SAMPLERS = 8
MAX_EVENTS = 4096
PREFIX = "__probe__."
# The learner's own collectives, as torch.distributed names them (wrapped where the module holds them).
COLLECTIVES = (
    "all_reduce",
    "broadcast",
    "barrier",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "broadcast_object_list",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "gather",
    "scatter",
    "all_to_all",
    "all_to_all_single",
)


def dataset() -> tuple[torch.Tensor, torch.Tensor]:
    """The 64 samples of the prompt: x ~ N(0, 1) from seed 1234, y = x @ [1, -2, 0.5, 3] + 0.5."""
    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(1234))
    return x, x @ TRUE_W.T + TRUE_B


def _fresh() -> dict:
    return {
        "rows": [],
        "forwards": 0,
        "backwards": 0,
        "stale": 0,
        "backend": "",
        "fit": [],  # [rows, outputs, output gradient or None] of the first forwards
        "last": {},  # parameter name -> values at the last DDP forward
        "samplers": [],  # [sampler, iterations, epoch at its first iteration]
        "dp_forwards": 0,
        "steps": 0,  # optimizer steps (any optimizer)
        "lr": -1.0,  # the learning rate of the last step's first parameter group
        "empty_steps": 0,  # steps whose parameters all had no gradient (None or zero)
        "foreign_steps": 0,  # steps of an optimizer holding none of the DDP model's parameters
        "ddp_params": set(),  # ids of the parameters of the modules DDP wrapped
        "shuffled": 0,  # passes through a shuffling DistributedSampler
        "keys": set(),  # the seed + epoch of those passes
        "log": None,  # this rank's event file descriptor
        "events": 0,
    }


_seen: dict = _fresh()


def _event(text: str) -> None:
    """Append one event to this rank's log at once (a rank may hang or be killed right after)."""
    if _seen["log"] is None or _seen["events"] >= MAX_EVENTS:
        return
    _seen["events"] += 1
    with contextlib.suppress(OSError):
        os.write(_seen["log"], (text + "\n").encode())


def _numel(value) -> int:
    if isinstance(value, torch.Tensor):
        return int(value.numel())
    if isinstance(value, (list, tuple)):
        return sum(_numel(v) for v in value)
    return 0


def _stale(module) -> bool:
    for p in module.parameters():
        g = p.grad
        if g is not None and bool(g.detach().abs().sum() > 0):
            return True
    return False


def _ddp_forward(original):
    def forward(self, *inputs, **kwargs):
        _seen["forwards"] += 1
        if not _seen["backend"]:
            try:
                _seen["backend"] = str(dist.get_backend(self.process_group))
            except Exception:
                _seen["backend"] = "?"
        first = inputs[0] if inputs else next(iter(kwargs.values()), None)
        rows = None
        if isinstance(first, torch.Tensor) and first.dim() == 2:
            rows = first.detach().cpu().float().clone()
            if sum(len(r) for r in _seen["rows"]) < MAX_ROWS:
                _seen["rows"].append(rows)
        with contextlib.suppress(Exception):  # a module whose parameters cannot be read: no snapshot
            _seen["last"] = {n: p.detach().cpu().double().clone() for n, p in self.module.named_parameters()}
        out = original(self, *inputs, **kwargs)
        if isinstance(out, torch.Tensor) and out.requires_grad:
            entry = None
            if rows is not None and out.numel() == len(rows) and len(_seen["fit"]) < FIT_FORWARDS:
                entry = [rows, out.detach().cpu().double().reshape(-1).clone(), None]
                _seen["fit"].append(entry)
            module = self.module

            def at_backward(grad, entry=entry, module=module):
                # Runs first in backward, before any parameter's gradient: DDP's all-reduce follows.
                _seen["backwards"] += 1
                _seen["stale"] += _stale(module)
                if entry is not None:
                    entry[2] = grad.detach().cpu().double().reshape(-1).clone()
                _event("B")

            out.register_hook(at_backward)
        return out

    forward._gpulab_probe = True
    return forward


def _ddp_init(original):
    def init(self, *args, **kwargs):
        _event("W")  # DDP's start-up broadcast of rank 0's weights
        original(self, *args, **kwargs)
        with contextlib.suppress(Exception):  # a module whose parameters cannot be read: none recorded
            _seen["ddp_params"].update(id(p) for p in self.module.parameters())

    init._gpulab_probe = True
    return init


def _dp_forward(original):
    def forward(self, *inputs, **kwargs):
        _seen["dp_forwards"] += 1
        return original(self, *inputs, **kwargs)

    forward._gpulab_probe = True
    return forward


def _sampler_init(original):
    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        if len(_seen["samplers"]) < MAX_SAMPLERS:
            _seen["samplers"].append([self, 0, -1])

    init._gpulab_probe = True
    return init


def _sampler_iter(original):
    def iterate(self):
        for entry in _seen["samplers"]:
            if entry[0] is self:
                if entry[1] == 0:
                    entry[2] = int(getattr(self, "epoch", -1))
                entry[1] += 1
        with contextlib.suppress(Exception):  # a sampler whose seed or epoch is not a number: not counted
            if self.shuffle:
                _seen["shuffled"] += 1
                if len(_seen["keys"]) < MAX_EVENTS:
                    _seen["keys"].add(int(self.seed) + int(self.epoch))
        return original(self)

    iterate._gpulab_probe = True
    return iterate


def _collective(name, original):
    @functools.wraps(original)
    def call(*args, **kwargs):
        _event(f"C {name} {_numel(args[0]) if args else 0}")
        return original(*args, **kwargs)

    call._gpulab_probe = True
    return call


def _instrument() -> None:
    """Wrap DDP, DataParallel, DistributedSampler and torch.distributed's collectives once (pass-through)."""
    if getattr(DistributedDataParallel.forward, "_gpulab_probe", False):
        return
    DistributedDataParallel.forward = _ddp_forward(DistributedDataParallel.forward)
    DistributedDataParallel.__init__ = _ddp_init(DistributedDataParallel.__init__)
    nn.DataParallel.forward = _dp_forward(nn.DataParallel.forward)
    DistributedSampler.__init__ = _sampler_init(DistributedSampler.__init__)
    DistributedSampler.__iter__ = _sampler_iter(DistributedSampler.__iter__)
    for name in COLLECTIVES:
        if callable(getattr(dist, name, None)):
            setattr(dist, name, _collective(name, getattr(dist, name)))


def _before_step(optimizer, args, kwargs) -> None:
    with contextlib.suppress(Exception):  # an optimizer without param_groups: nothing recorded
        params = [p for group in optimizer.param_groups for p in group["params"]]
        if not any(p.grad is not None and bool(p.grad.detach().abs().sum() > 0) for p in params):
            _seen["empty_steps"] += 1
        if _seen["ddp_params"] and not any(id(p) in _seen["ddp_params"] for p in params):
            _seen["foreign_steps"] += 1


def _after_step(optimizer, args, kwargs) -> None:
    _seen["steps"] += 1
    with contextlib.suppress(Exception):  # an optimizer without a numeric lr: none recorded
        _seen["lr"] = float(optimizer.param_groups[0]["lr"])


register_optimizer_step_pre_hook(_before_step)
register_optimizer_step_post_hook(_after_step)

# Before the learner's module is imported, so `from torch.distributed import all_reduce` gets the wrapped one too.
_instrument()


def _returned(state) -> str:
    """Describe what train returned when it is not a dict of tensors ("" when it is)."""
    if not isinstance(state, Mapping):
        return "None" if state is None else f"a {type(state).__name__}"
    for key, value in state.items():
        if not isinstance(value, torch.Tensor):
            return f"a dict whose {str(key)[:40]!r} is a {type(value).__name__}, not a tensor"
    return ""


def _text(s: str) -> torch.Tensor:
    return torch.tensor(list(s.encode()) or [0], dtype=torch.uint8)


def _observations() -> dict:
    rows = torch.cat(_seen["rows"])[:MAX_ROWS] if _seen["rows"] else torch.zeros(0, 4)
    fit = [e for e in _seen["fit"] if e[2] is not None and len(e[2]) == len(e[1])]
    extra = {
        PREFIX + "rows": rows,
        PREFIX + "forwards": torch.tensor(_seen["forwards"]),
        PREFIX + "backwards": torch.tensor(_seen["backwards"]),
        PREFIX + "stale": torch.tensor(_seen["stale"]),
        PREFIX + "dp_forwards": torch.tensor(_seen["dp_forwards"]),
        PREFIX + "steps": torch.tensor(_seen["steps"]),
        PREFIX + "lr": torch.tensor(_seen["lr"], dtype=torch.float64),
        PREFIX + "empty_steps": torch.tensor(_seen["empty_steps"]),
        PREFIX + "foreign_steps": torch.tensor(_seen["foreign_steps"]),
        PREFIX + "shuffled": torch.tensor(_seen["shuffled"]),
        PREFIX + "shuffles": torch.tensor(len(_seen["keys"])),
        PREFIX + "backend": _text(_seen["backend"]),
        PREFIX + "fit.sizes": torch.tensor([len(e[1]) for e in fit] or [0]),
        PREFIX + "fit.rows": torch.cat([e[0] for e in fit]) if fit else torch.zeros(0, 4),
        PREFIX + "fit.out": torch.cat([e[1] for e in fit]) if fit else torch.zeros(0),
        PREFIX + "fit.grad": torch.cat([e[2] for e in fit]) if fit else torch.zeros(0),
    }
    for name, value in _seen["last"].items():
        extra[PREFIX + "last." + name] = value
    samplers = []
    for sampler, iterations, epoch in _seen["samplers"]:
        with contextlib.suppress(Exception):  # a sampler whose settings are not numbers is left out
            row = [int(sampler.num_replicas), int(sampler.rank), int(sampler.seed), int(bool(sampler.shuffle))]
            samplers.append([*row, iterations, epoch])
    extra[PREFIX + "samplers"] = torch.tensor(samplers, dtype=torch.int64).reshape(-1, 6)
    return extra


def _read_events(path: str) -> list:
    """The rank's events, run-length encoded: [[event, count], ...]."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()[:MAX_EVENTS]
    except OSError:
        return []
    runs: list = []
    for line in lines:
        if runs and runs[-1][0] == line:
            runs[-1][1] += 1
        else:
            runs.append([line, 1])
    return runs


def run(submission, world_size: int = 2, timeout_s: float = 40.0) -> list:
    """Run submission.train on world_size ranks; return each rank's RankResult.plain() with observations."""
    from runner.vdev import ddp

    _instrument()
    folder = tempfile.mkdtemp(prefix="gpulab-ranks-")

    def train(rank: int, ws: int):
        _seen.update(_fresh())
        _seen["log"] = os.open(os.path.join(folder, f"rank{rank}"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        state = submission.train(rank, ws)
        returned = _returned(state)
        if returned:
            return {PREFIX + "returned": _text(returned), **_observations()}
        return {**dict(state), **_observations()}

    try:
        results = [r.plain() for r in ddp.run(train, world_size=world_size, timeout_s=timeout_s)]
        for r in results:
            r["events"] = _read_events(os.path.join(folder, f"rank{r['rank']}"))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return results
