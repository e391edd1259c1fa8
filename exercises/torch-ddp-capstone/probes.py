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
- how many times the rank called torch.save, and the final parameters of the model it wrapped in DDP.
After the ranks finish, the probe loads the checkpoint file into a plain build_model() and reports how that went.
The hidden tests import make_data, build_model and the constants from here.
"""

import os
import pickle
import tempfile
from collections.abc import Mapping

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.optim.optimizer import register_optimizer_step_pre_hook
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

# Warm the subject before it forks per-test children, so ranks start in ~0.1 s instead of seconds.
import torch._dynamo  # noqa: E402,F401

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


_seen: dict = {"forwards": [], "marks": [], "samplers": [], "lrs": [], "saves": [], "modules": []}


def _is_train_set(dataset, first_row) -> bool:
    try:
        return len(dataset) == N_TRAIN and bool(torch.equal(dataset[0][0], first_row))
    except Exception:
        return False


def _instrument() -> None:
    if getattr(DistributedDataParallel.forward, "_gpulab_probe", False):
        return
    train_x = make_data()[0].tensors[0]
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
            _seen["forwards"].append(batch)

            def reached(grad, batch=batch):
                batch["trained"] = True  # a backward pass went through this batch's output

            out.register_hook(reached)
        return out

    def mark():
        _seen["marks"].append(len(_seen["forwards"]))

    def loader_iter(self):
        mark()
        return original_loader_iter(self)

    def sampler_iter(self):
        mark()
        try:  # a subclass may lack an attribute: recording must never break the learner's loop
            if _is_train_set(self.dataset, train_x[0]):
                _seen["samplers"].append([int(self.seed), int(self.epoch), int(self.num_replicas), int(self.rank),
                                          int(bool(self.shuffle)), len(_seen["forwards"])])
        except Exception:
            pass
        return original_sampler_iter(self)

    def set_epoch(self, epoch):
        mark()
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
    }


def _load_checkpoint(path: str) -> dict:
    seen = {"exists": os.path.exists(path), "keys": [], "load_error": None, "type": None, "pickled": None, "state": {}}
    if not seen["exists"]:
        return seen
    try:
        obj = torch.load(path, weights_only=True)
    except pickle.UnpicklingError as exc:
        # weights_only=True refuses pickled objects; load it the unsafe way (it is the learner's own file, in the
        # learner's own process) only to say what it holds.
        seen["load_error"] = f"torch.load: {type(exc).__name__}: {str(exc)[:300]}"
        try:
            seen["pickled"] = type(torch.load(path, weights_only=False)).__name__
        except Exception:
            pass
        return seen
    except Exception as exc:
        seen["load_error"] = f"torch.load: {type(exc).__name__}: {str(exc)[:300]}"
        return seen
    seen["type"] = type(obj).__name__
    if not isinstance(obj, Mapping):
        return seen
    seen["keys"] = [str(k) for k in obj][:20]
    model = build_model()
    try:
        model.load_state_dict(obj)
    except Exception as exc:
        seen["load_error"] = f"{type(exc).__name__}: {str(exc)[:400]}"
        return seen
    seen["state"] = {k: v.detach().double().flatten().tolist() for k, v in model.state_dict().items()}
    return seen


def run(submission, world_size: int = 2, timeout_s: float = 40.0) -> dict:
    """Run submission.train on world_size ranks with one checkpoint path; return the ranks and the checkpoint."""
    from runner.vdev import ddp

    _instrument()
    folder = tempfile.mkdtemp(prefix="capstone-")
    path = os.path.join(folder, "model.pt")

    def train(rank: int, ws: int):
        result = submission.train(rank, ws, path)
        if not isinstance(result, Mapping):
            return result  # the harness reports the wrong type
        extra = {
            **{PREFIX + k: v for k, v in _training().items()},
            PREFIX + "lrs": torch.tensor(_seen["lrs"] or [-1.0], dtype=torch.float64),
            PREFIX + "saves": torch.tensor(len(_seen["saves"])),
            PREFIX + "wrapped": torch.tensor(len(_seen["modules"])),
        }
        if _seen["modules"]:
            for k, v in _seen["modules"][0].state_dict().items():
                extra[PREFIX + "param." + k] = v.detach().cpu().clone()
        return {**dict(result), **extra}

    ranks = [r.plain() for r in ddp.run(train, world_size=world_size, timeout_s=timeout_s)]
    return {"ranks": ranks, "checkpoint": _load_checkpoint(path), "path": path}
