"""Probes for torch-ddp-comm-tuning: run the learner's train and train_two_heads in real processes with real DDP
over gloo (runner.vdev.ddp), measure each rank's communication (runner.vdev.comm: collective calls, bytes and their
dtypes per optimizer step), and observe what the learner's wrappers did:

- ``wrappers``: for each DistributedDataParallel the rank made, its ``find_unused_parameters``,
  ``gradient_as_bucket_view``, ``static_graph`` and ``bucket_bytes_cap`` (bytes) as DDP holds them, and the
  communication hooks registered on it (``hooks``: how many; ``torch_hooks``: how many of them are torch's own,
  defined in a ``torch.`` module; ``none_states``: how many were registered with state None);
- ``grads``: at each optimizer step (a global step pre-hook), how many parameters have a ``.grad``, in how many
  distinct storages, and how many bytes of them sit in a storage of their own (a ``.grad`` that is not a view into
  one of DDP's flat buckets: gradients that share a storage are views into one bucket); and ``norm``, the L2 norm
  of all of them together (what the optimizer is about to step on, after DDP and any hook).

They travel back from the rank as tensors beside the learner's state dict (keys starting ``probe.``) and are
split off here; the learner's tensors come back as raw bytes (``_plain``). Like every probe's, these are
observations a learner who patches this file could forge; the accuracy, which the tests compute from the returned
weights, cannot be forged without training. The hidden tests import the data, the models and the constants from
here.
"""

from collections.abc import Mapping

import torch
from torch import nn

# The prompt's and the starter's settings.
N_TRAIN, N_VAL, BATCH, EPOCHS, LR = 512, 256, 32, 8, 3e-3
W_PER_KW = 1000.0
BUCKET_MB = 0.25
TWO_HEAD_STEPS, TWO_HEAD_LR = 6, 0.1
_PREFIX = "probe."


def make_dataset() -> tuple[torch.Tensor, torch.Tensor]:
    """The starter's 768 samples: 16 readings x ~ N(0, 1), y in watts within about 3 kW of a baseline."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(N_TRAIN + N_VAL, 16, generator=g)
    w = torch.randn(16, 1, generator=g) / 4
    return x, 3000 * torch.tanh(x @ w) + 50 * torch.randn(N_TRAIN + N_VAL, 1, generator=g)


def build_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(16, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 1)
    )


class TwoHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.trunk = nn.Sequential(nn.Linear(8, 16), nn.Tanh())
        self.head_a = nn.Linear(16, 1)
        self.head_b = nn.Linear(16, 1)

    def forward(self, x: torch.Tensor, task: str) -> torch.Tensor:
        h = self.trunk(x)
        return self.head_a(h) if task == "a" else self.head_b(h)


def two_head_batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor, str]:
    g = torch.Generator().manual_seed(100 * step + rank)
    x = torch.randn(8, 8, generator=g)
    task = "a" if step % 2 == 0 else "b"
    y = x.sum(dim=1, keepdim=True) if task == "a" else x[:, :1] - x[:, 1:2]
    return x, y, task


def _watch() -> tuple[list, list]:
    """In a rank: keep every DDP wrapper made from now on, and sample the gradients' storages at every step."""
    from torch.nn.parallel import DistributedDataParallel
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    wrappers: list = []
    grads: list = []
    original = DistributedDataParallel.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        wrappers.append(self)

    def before_step(optimizer, args, kwargs):
        tensors = [p.grad for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        by_storage: dict[int, list] = {}
        for t in tensors:
            by_storage.setdefault(t.untyped_storage().data_ptr(), []).append(t)
        own = sum(
            t.numel() * t.element_size()
            for group in by_storage.values()
            if len(group) == 1
            for t in group
            if t.untyped_storage().nbytes() == t.numel() * t.element_size()
        )
        norm = float(torch.sqrt(sum((t.detach().double() ** 2).sum() for t in tensors))) if tensors else 0.0
        grads.append([len(tensors), len(by_storage), own, norm])

    DistributedDataParallel.__init__ = init
    register_optimizer_step_pre_hook(before_step)
    return wrappers, grads


_WRAPPER_FIELDS = 7


def _hooks(wrapper) -> list[int]:
    """Return how many comm hooks the wrapper holds, how many are torch's own, how many got state None.

    runner.vdev.comm registers a dispatcher at the first forward (DDP's own all-reduce through its Python twin,
    torch's allreduce_hook, so that its bytes are counted) and a hook the learner registers later replaces the
    dispatcher's target: look through it, and leave the measuring twin out.
    """
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    hooks = []
    for hook, state in getattr(wrapper, "_comm_hooks", []):
        if getattr(hook, "__name__", "") == "_dispatch_hook" and hasattr(state, "hook"):
            if state.hook is default_hooks.allreduce_hook:
                continue
            hook, state = state.hook, state.state
        hooks.append((hook, state))
    own = sum(str(getattr(hook, "__module__", "") or "").startswith("torch.") for hook, _ in hooks)
    return [len(hooks), own, sum(state is None for _, state in hooks)]


def _observed(wrappers: list, grads: list) -> dict[str, torch.Tensor]:
    rows = [
        [
            int(w.find_unused_parameters),
            int(w.gradient_as_bucket_view),
            int(w.static_graph),
            int(w.bucket_bytes_cap),
            *_hooks(w),
        ]
        for w in wrappers
    ]
    return {
        _PREFIX + "wrappers": torch.tensor(rows, dtype=torch.int64).reshape(-1, _WRAPPER_FIELDS),
        _PREFIX + "grads": torch.tensor([g[:3] for g in grads], dtype=torch.int64).reshape(-1, 3),
        _PREFIX + "grad_norms": torch.tensor([g[3] for g in grads], dtype=torch.float64),
    }


def _plain(rank_result) -> dict:
    """Return a rank's result as data, its ``probe.`` tensors split off into ``observed`` (lists of dicts).

    The weights travel as raw little-endian bytes (``bytes``, with ``dtype`` and ``shape``), not as lists of
    numbers: build_model()'s 136,193 float32 values on two ranks would not fit in one reply as JSON numbers.
    """
    result = rank_result.plain()
    result["state"] = {
        k: {"dtype": str(v.dtype), "shape": list(v.shape), "bytes": v.astype(v.dtype.newbyteorder("<")).tobytes()}
        for k, v in rank_result.state.items()
        if not k.startswith(_PREFIX)
    }
    raw = {k[len(_PREFIX) :]: v.ravel().tolist() for k, v in rank_result.state.items() if k.startswith(_PREFIX)}

    def rows(name: str, width: int) -> list:
        data = raw.get(name, [])
        return [data[i : i + width] for i in range(0, len(data), width)]

    result["observed"] = {
        "wrappers": [
            {"find_unused_parameters": bool(a), "gradient_as_bucket_view": bool(b), "static_graph": bool(c),
             "bucket_bytes_cap": int(d), "hooks": int(e), "torch_hooks": int(f), "none_states": int(g)}
            for a, b, c, d, e, f, g in rows("wrappers", _WRAPPER_FIELDS)
        ],
        "grads": [
            {"grads": a, "storages": b, "own_bytes": c, "norm": n}
            for (a, b, c), n in zip(rows("grads", 3), raw.get("grad_norms", []), strict=False)
        ],
    }  # fmt: skip
    return result


def _warm() -> None:
    """Import what DDP's first forward and the optimizer import lazily, before the ranks fork (they then start in
    ~0.1 s instead of paying seconds each). Done here, not at import: the judge imports this file too, for the
    data and the models, and never forks ranks."""
    import torch._dynamo
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks  # noqa: F401

    torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)


def _run(fn, world_size: int, timeout_s: float) -> list:
    from runner.vdev import ddp

    _warm()

    def train(rank: int, ws: int):
        wrappers, grads = _watch()
        state = fn(rank, ws)
        if not isinstance(state, Mapping):
            return state  # the harness reports what train returned instead of a dict
        return {**dict(state), **_observed(wrappers, grads)}

    return [_plain(r) for r in ddp.run(train, world_size=world_size, timeout_s=timeout_s, measure=True)]


def run(submission, world_size: int = 2, timeout_s: float = 40.0) -> list:
    """Run submission.train on world_size ranks, measuring; return each rank's result with ``observed``."""
    return _run(submission.train, world_size, timeout_s)


def run_two_heads(submission, world_size: int = 2, timeout_s: float = 40.0) -> list:
    """Run submission.train_two_heads on world_size ranks, measuring; return each rank's result with ``observed``."""
    return _run(submission.train_two_heads, world_size, timeout_s)


def run_both(submission, world_size: int = 2, timeout_s: float = 40.0) -> dict:
    """Run train, then train_two_heads, in one call (one learner process to start, not two): their results."""
    return {
        "run": run(submission, world_size, timeout_s),
        "run_two_heads": run_two_heads(submission, world_size, timeout_s),
    }
