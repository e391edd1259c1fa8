"""Probes for torch-ddp-capstone: run the learner's train(rank, world_size, checkpoint_path) in real processes with
real DDP over gloo (runner.vdev.ddp) and report, as data, what each rank returned and what it did.

Observations, recorded inside each rank (forgeable by a learner who patches this file, like every probe; the
tests also check results that cannot be forged without training correctly):
- every batch that went through a DistributedDataParallel forward and whose output a backward pass then reached
  (a training batch; an evaluation forward, even through the wrapper in training mode, has no backward): its
  size and the dataset index of each of its samples, in order;
- where each pass over the data began: every DataLoader or DistributedSampler iteration and set_epoch call, as
  the number of training batches before it; and, for each DistributedSampler iterated over the training set, its
  seed, epoch, num_replicas, rank and shuffle flag;
- the learning rate of every optimizer step (a global step pre-hook);
- how many times the rank called torch.save, and the final parameters of the model it wrapped in DDP;
- for the first training batches, how the gradient that reached the DDP output compares with that of the script's
  loss (cross-entropy averaged over the batch): the factor and how far from proportional it was;
- every torch.distributed call the rank made through `dist.` (collectives, init and destroy), appended to a file per
  rank as it starts and ends, so the trail survives a rank that hangs and is killed;
- what train returned, when it was not a dict of tensors (the type's name), so one wrong type fails one test.
After the ranks finish, the probe loads the checkpoint file into a plain build_model() and reports how that went:
the keys missing, unexpected and of the wrong shape, in its own words (the library's text kept apart as details).
The hidden tests import make_data, build_model and the constants from here.
"""

import contextlib
import os
import pickle
import tempfile
from collections.abc import Mapping

import torch

# Warm the subject before it forks per-test children, so ranks start in ~0.1 s instead of seconds.
import torch._dynamo
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.optim.optimizer import register_optimizer_step_pre_hook
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)

# The single-device script's settings (the prompt and starter.py state the same).
FEATURES, CLASSES = 16, 4
N_TRAIN, N_VAL = 1024, 1024
BATCH, LR, EPOCHS, TARGET = 32, 0.005, 6, 0.90
PREFIX = "__probe__."
MAX_SAMPLES = 4096


def make_data() -> tuple[TensorDataset, TensorDataset]:
    """The starter's data: 1024 training and 1024 validation samples from 4 overlapping Gaussian clusters."""
    g = torch.Generator().manual_seed(2024)
    centers = torch.randn(CLASSES, FEATURES, generator=g)
    y = torch.randint(0, CLASSES, (2048,), generator=g)
    x = centers[y] + torch.randn(2048, FEATURES, generator=g)
    return TensorDataset(x[:1024], y[:1024]), TensorDataset(x[1024:], y[1024:])


def build_model() -> nn.Module:
    return nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, CLASSES))


_seen: dict = {"forwards": [], "marks": [], "samplers": [], "lrs": [], "saves": [], "modules": [], "set_epochs": [],
               "scales": []}
_log: dict = {"path": None}
SCALED_BATCHES = 8
# The torch.distributed functions whose calls are logged (looked up on the module at call time by `dist.name(...)`).
LOGGED = ("init_process_group", "destroy_process_group", "barrier", "all_reduce", "broadcast", "all_gather",
          "all_gather_into_tensor", "all_gather_object", "broadcast_object_list", "reduce", "gather", "scatter",
          "reduce_scatter", "reduce_scatter_tensor", "all_to_all", "send", "recv")


def _note(line: str) -> None:
    path = _log["path"]
    if path is None:
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def _logged(name, original):
    def call(*args, **kwargs):
        _note("start " + name)
        out = original(*args, **kwargs)
        _note("end " + name)
        return out

    call._gpulab_probe = True
    return call


def _is_train_set(dataset, first_row) -> bool:
    try:
        return len(dataset) == N_TRAIN and bool(torch.equal(dataset[0][0], first_row))
    except Exception:
        return False


def _instrument() -> None:
    if getattr(DistributedDataParallel.forward, "_gpulab_probe", False):
        return
    train_x, train_y = make_data()[0].tensors
    original_init, original_forward, original_save = (
        DistributedDataParallel.__init__, DistributedDataParallel.forward, torch.save)
    original_loader_iter, original_sampler_iter, original_set_epoch = (
        DataLoader.__iter__, DistributedSampler.__iter__, DistributedSampler.set_epoch)

    def init(self, module, *args, **kwargs):
        original_init(self, module, *args, **kwargs)
        _seen["modules"].append(self.module)

    def forward(self, *inputs, **kwargs):
        first = inputs[0] if inputs else next(iter(kwargs.values()), None)
        out = original_forward(self, *inputs, **kwargs)
        if isinstance(first, torch.Tensor) and first.dim() == 2 and isinstance(out, torch.Tensor) and out.requires_grad:
            batch = {"size": int(first.shape[0]), "indices": [], "trained": False}
            if first.shape[1] == FEATURES and sum(len(b["indices"]) for b in _seen["forwards"]) < MAX_SAMPLES:
                rows = first.detach().cpu().float()
                dist_to = (rows[:, None, :] - train_x[None, :, :]).abs().amax(dim=2)
                best, index = dist_to.min(dim=1)
                batch["indices"] = torch.where(best < 1e-6, index, -1).tolist()

            if (len(_seen["scales"]) + sum("out" in b for b in _seen["forwards"]) < SCALED_BATCHES
                    and batch["indices"] and min(batch["indices"]) >= 0 and out.dim() == 2 and out.shape[1] == CLASSES):
                batch["out"], batch["y"] = out.detach().clone(), train_y[torch.tensor(batch["indices"])]
            _seen["forwards"].append(batch)

            def reached(grad, batch=batch):
                batch["trained"] = True  # a backward pass went through this batch's output
                if "out" in batch:
                    _seen["scales"].append(_grad_scale(grad, batch.pop("out"), batch.pop("y")))

            out.register_hook(reached)
        return out

    def mark():
        _seen["marks"].append(len(_seen["forwards"]))

    def loader_iter(self):
        mark()
        return original_loader_iter(self)

    def sampler_iter(self):
        mark()
        # a subclass may lack an attribute: recording must never break the learner's loop
        with contextlib.suppress(Exception):
            if _is_train_set(self.dataset, train_x[0]):
                _seen["samplers"].append([int(self.seed), int(self.epoch), int(self.num_replicas), int(self.rank),
                                          int(bool(self.shuffle)), len(_seen["forwards"])])
        return original_sampler_iter(self)

    def set_epoch(self, epoch):
        mark()
        _seen["set_epochs"].append(int(_is_train_set(getattr(self, "dataset", None), train_x[0])))  # never raises
        return original_set_epoch(self, epoch)

    def save(obj, f, *args, **kwargs):
        _seen["saves"].append(str(f)[:200])
        return original_save(obj, f, *args, **kwargs)

    def step_hook(optimizer, args, kwargs):
        _seen["lrs"].append(float(optimizer.param_groups[0]["lr"]))

    forward._gpulab_probe = True
    DistributedDataParallel.__init__ = init
    DistributedDataParallel.forward = forward
    DataLoader.__iter__ = loader_iter
    DistributedSampler.__iter__ = sampler_iter
    DistributedSampler.set_epoch = set_epoch
    torch.save = save
    register_optimizer_step_pre_hook(step_hook)
    for name in LOGGED:
        original = getattr(dist, name, None)
        if callable(original) and not getattr(original, "_gpulab_probe", False):
            setattr(dist, name, _logged(name, original))


def _grad_scale(grad, out, y) -> list:
    """[factor, misfit]: grad ~ factor * d(mean cross-entropy)/d(out); misfit 0 when exactly proportional."""
    try:
        base = (torch.softmax(out.double(), dim=1) - nn.functional.one_hot(y, CLASSES).double()) / len(y)
        g = grad.detach().double()
        factor = float((g * base).sum() / (base * base).sum())
        misfit = float((g - factor * base).norm() / g.norm().clamp_min(1e-30))
        return [factor, misfit]
    except Exception:
        return [float("nan"), float("nan")]


def _training() -> dict:
    """The training batches (forwards a backward reached), where passes began and the samplers, as tensors."""
    trained_before, count = [], 0
    for batch in _seen["forwards"]:
        trained_before.append(count)
        count += batch["trained"]
    trained_before.append(count)
    trained = [b for b in _seen["forwards"] if b["trained"]]
    starts = sorted({trained_before[m] for m in _seen["marks"]} - {count})
    samplers = [[*s[:5], trained_before[s[5]]] for s in _seen["samplers"]]
    return {
        "sizes": torch.tensor([b["size"] for b in trained] or [0], dtype=torch.int64),
        "indices": torch.tensor([i for b in trained for i in b["indices"]][:MAX_SAMPLES] or [-2], dtype=torch.int64),
        "starts": torch.tensor(starts or [-1], dtype=torch.int64),
        "samplers": torch.tensor(samplers or [[-1] * 6], dtype=torch.int64),
        "set_epochs": torch.tensor(_seen["set_epochs"] or [-1], dtype=torch.int64),
        "scales": torch.tensor(_seen["scales"] or [[float("nan")] * 2], dtype=torch.float64),
    }


def _load_checkpoint(path: str) -> dict:
    """What the checkpoint file holds and how it loads into a plain build_model(), told as data.

    load_error names the step that failed ("torch.load", "keys", "load_state_dict") and load_detail keeps the
    library's own text, for the details a learner may open.
    """
    seen = {"exists": os.path.exists(path), "keys": [], "load_error": None, "load_detail": "", "type": None,
            "pickled": None, "missing": [], "unexpected": [], "shapes": [], "state": {}}
    if not seen["exists"]:
        return seen
    try:
        obj = torch.load(path, weights_only=True)
    except pickle.UnpicklingError as exc:
        # weights_only=True refuses pickled objects; load it the unsafe way (it is the learner's own file, in the
        # learner's own process) only to say what it holds.
        seen["load_error"], seen["load_detail"] = "torch.load", f"{type(exc).__name__}: {str(exc)[:300]}"
        with contextlib.suppress(Exception):
            seen["pickled"] = type(torch.load(path, weights_only=False)).__name__
        return seen
    except Exception as exc:
        seen["load_error"], seen["load_detail"] = "torch.load", f"{type(exc).__name__}: {str(exc)[:300]}"
        seen["type"] = type(exc).__name__
        return seen
    seen["type"] = type(obj).__name__
    if not isinstance(obj, Mapping):
        return seen
    seen["keys"] = [str(k) for k in obj][:20]
    model = build_model()
    want = model.state_dict()
    seen["missing"] = [k for k in want if k not in obj][:20]
    seen["unexpected"] = [str(k) for k in obj if k not in want][:20]
    seen["shapes"] = [
        [k, list(want[k].shape), list(obj[k].shape)]
        for k in want if k in obj and isinstance(obj[k], torch.Tensor) and obj[k].shape != want[k].shape
    ][:20]
    if seen["missing"] or seen["unexpected"] or seen["shapes"]:
        seen["load_error"] = "keys"
        return seen
    try:
        model.load_state_dict(obj)
    except Exception as exc:
        seen["load_error"], seen["load_detail"] = "load_state_dict", f"{type(exc).__name__}: {str(exc)[:400]}"
        return seen
    seen["state"] = {k: v.detach().double().flatten().tolist() for k, v in model.state_dict().items()}
    return seen


def _calls(folder: str, world_size: int) -> list[dict]:
    """Each rank's logged torch.distributed calls: how many of each it started, the ones it saw end, and the
    last line ("start NAME" when the rank stopped inside that call)."""
    out = []
    for rank in range(world_size):
        seen: dict = {"started": {}, "ended": {}, "last": ""}
        try:
            with open(os.path.join(folder, f"calls-{rank}.log")) as f:
                for line in f:
                    kind, _, name = line.strip().partition(" ")
                    if kind in ("start", "end"):
                        key = "started" if kind == "start" else "ended"
                        seen[key][name] = seen[key].get(name, 0) + 1
                        seen["last"] = line.strip()
        except OSError:
            pass
        out.append(seen)
    return out


def _name_bytes(name: str) -> torch.Tensor:
    return torch.tensor(list(name.encode()[:60]) or [32], dtype=torch.uint8)


def run(submission, world_size: int = 2, timeout_s: float = 40.0) -> dict:
    """Run submission.train on world_size ranks with one checkpoint path; return the ranks, each rank's
    torch.distributed calls and the checkpoint."""
    from runner.vdev import ddp

    _instrument()
    folder = tempfile.mkdtemp(prefix="capstone-")
    path = os.path.join(folder, "model.pt")

    def train(rank: int, ws: int):
        _log["path"] = os.path.join(folder, f"calls-{rank}.log")
        result = submission.train(rank, ws, path)
        extra = {
            **{PREFIX + k: v for k, v in _training().items()},
            PREFIX + "lrs": torch.tensor(_seen["lrs"] or [-1.0], dtype=torch.float64),
            PREFIX + "saves": torch.tensor(len(_seen["saves"])),
            PREFIX + "wrapped": torch.tensor(len(_seen["modules"])),
        }
        if _seen["modules"]:
            for k, v in _seen["modules"][0].state_dict().items():
                extra[PREFIX + "param." + k] = v.detach().cpu().clone()
        if not isinstance(result, Mapping):
            return {PREFIX + "returned": _name_bytes(type(result).__name__), **extra}
        returned = {}
        for k, v in result.items():
            if isinstance(v, torch.Tensor):
                if v.dtype not in (torch.float32, torch.float64, torch.int64, torch.int32, torch.bool):
                    v = v.detach().double()
                returned[str(k)] = v
            elif isinstance(v, (int, float)):  # told in one test; the others still grade the value
                returned[str(k)] = torch.tensor(float(v), dtype=torch.float64)
                extra[PREFIX + "type." + str(k)] = _name_bytes(type(v).__name__)
            else:
                extra[PREFIX + "type." + str(k)] = _name_bytes(type(v).__name__)
        return {**returned, **extra}

    ranks = [r.plain() for r in ddp.run(train, world_size=world_size, timeout_s=timeout_s)]
    return {"ranks": ranks, "calls": _calls(folder, world_size), "checkpoint": _load_checkpoint(path), "path": path}
