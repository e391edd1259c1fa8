"""torch-comm-budget-capstone's probe against hand-computed bytes of a known model.

The probe (exercises/torch-comm-budget-capstone/probes.py) runs a submission's train in two real gloo ranks and
reports runner.vdev.comm's counts and the weights as raw bytes. build_model() has 136,193 parameters: all its
gradients once are 544,772 bytes in float32 and 272,386 in bfloat16 (exercises/FACTS.md P46). The hidden tests'
bytes per epoch add the steps' bytes and the tail's, so a backward after the last step must show in the tail.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import types
from pathlib import Path

import pytest

from tests.support import BANK

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "worker"))  # the probe imports the runner as `runner`
pytestmark = pytest.mark.slow
FP32_BYTES, BF16_BYTES = 544_772, 272_386


@pytest.fixture(scope="module")
def probes() -> types.ModuleType:
    """The exercise's probes.py, loaded as the sandbox loads it (it warms torch: load it only when these run)."""
    spec = importlib.util.spec_from_file_location("budget_probes", BANK / "torch-comm-budget-capstone" / "probes.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _submission(probes: types.ModuleType, *, window: int, bf16: bool, extra_backward: bool = False):
    """A submission: 4 micro-batches of 8 rows in windows of ``window``, optionally a bfloat16 hook and a last
    backward that is never stepped on."""

    def hook(state, bucket):  # DDP reads the parameter names: state, bucket
        import torch.distributed as dist

        grads = bucket.buffer()
        sent = grads.to(torch.bfloat16).div_(dist.get_world_size())
        return dist.all_reduce(sent, async_op=True).get_future().then(lambda f: grads.copy_(f.value()[0]))

    def train(rank: int, world_size: int) -> dict[str, torch.Tensor]:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        dist.init_process_group("gloo")
        model = DistributedDataParallel(probes.build_model())
        if bf16:
            model.register_comm_hook(None, hook)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        x = torch.randn(8, 16, generator=torch.Generator().manual_seed(rank))
        for i in range(4):
            last = (i + 1) % window == 0
            with contextlib.nullcontext() if last else model.no_sync():
                model(x).square().mean().backward()
            if last:
                opt.step()
                opt.zero_grad()
        if extra_backward:
            model(x).square().mean().backward()
        dist.destroy_process_group()
        return model.module.state_dict()

    return types.SimpleNamespace(train=train)


def _ok(runs: list) -> list:
    assert [r["error"] for r in runs] == [None, None] and not any(r["timed_out"] for r in runs), runs
    return runs


def _total(comm: dict) -> int:
    return sum(s["bytes"] for s in comm["per_step"]) + comm["tail"]["bytes"]


def test_plain_ddp_sends_every_gradient_after_every_backward(probes: types.ModuleType) -> None:
    """Four steps of plain DDP: four float32 all-reduces of the whole model, 32 samples through the wrapper."""
    comm = _ok(probes.run(_submission(probes, window=1, bf16=False)))[0]["comm"]
    assert (comm["steps"], _total(comm), comm["dtypes"], comm["samples"]) == (
        4, 4 * FP32_BYTES, {"float32": 4 * FP32_BYTES}, 32
    )  # fmt: skip


def test_windows_and_bf16_divide_the_bytes_by_four(probes: types.ModuleType) -> None:
    """Windows of 2 under no_sync with a bfloat16 hook: 2 steps, each after one bfloat16 all-reduce."""
    runs = _ok(probes.run(_submission(probes, window=2, bf16=True)))
    comm = runs[0]["comm"]
    assert [s["bytes"] for s in comm["per_step"]] == [BF16_BYTES, BF16_BYTES]
    assert comm["dtypes"] == {"bfloat16": 2 * BF16_BYTES}
    assert runs[0]["state"]["0.weight"]["bytes"] == runs[1]["state"]["0.weight"]["bytes"]
    assert runs[0]["state"]["0.weight"] | {"bytes": b""} == {"dtype": "float32", "shape": [256, 16], "bytes": b""}


def test_a_backward_after_the_last_step_counts_in_the_tail(probes: types.ModuleType) -> None:
    """An all-reduce that no step follows is still communication: the tail holds it."""
    comm = _ok(probes.run(_submission(probes, window=1, bf16=False, extra_backward=True)))[0]["comm"]
    assert (comm["tail"]["bytes"], _total(comm)) == (FP32_BYTES, 5 * FP32_BYTES)
