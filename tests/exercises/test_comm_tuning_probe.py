"""torch-ddp-comm-tuning's probe against hand-computed observations of a known model.

The probe (exercises/torch-ddp-comm-tuning/probes.py) runs a submission's train in two real gloo ranks and reports,
beside runner.vdev.comm's counts, each DDP wrapper's settings and, at every optimizer step, how the gradients are
stored. build_model() has 8 parameter tensors, 136,193 float32 values (544,772 bytes); a 0.25 MiB cap makes one
bucket in step 1 and three from step 2 on (exercises/FACTS.md P23). With gradient_as_bucket_view the gradients are
views into those buckets: 1 storage, then 3, none of their own; without it 8 storages of their own (P24).
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import pytest

from tests.support import BANK

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "worker"))  # the probe imports the runner as `runner`
pytestmark = pytest.mark.slow
MLP_BYTES = 544_772


@pytest.fixture(scope="module")
def probes() -> types.ModuleType:
    """The exercise's probes.py, loaded as the sandbox loads it (it warms torch: load it only when these run)."""
    spec = importlib.util.spec_from_file_location("comm_tuning_probes", BANK / "torch-ddp-comm-tuning" / "probes.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _submission(probes: types.ModuleType, **options: object) -> types.SimpleNamespace:
    """A submission whose train makes 3 SGD steps of build_model() under DDP with ``options``."""

    def train(rank: int, world_size: int) -> dict[str, torch.Tensor]:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        dist.init_process_group("gloo")
        model = DistributedDataParallel(probes.build_model(), **options)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        x = torch.randn(8, 16, generator=torch.Generator().manual_seed(rank))
        for _ in range(3):
            model(x).square().mean().backward()
            opt.step()
            opt.zero_grad()
        dist.destroy_process_group()
        return model.module.state_dict()

    return types.SimpleNamespace(train=train)


def _ok(runs: list) -> list:
    assert [r["error"] for r in runs] == [None, None] and not any(r["timed_out"] for r in runs), runs
    return runs


def _storage(rank_result: dict) -> list[dict]:
    return [{k: g[k] for k in ("grads", "storages", "own_bytes")} for g in rank_result["observed"]["grads"]]


def test_gradient_norms_are_what_the_optimizer_steps_on(probes: types.ModuleType) -> None:
    """Both ranks step on the same averaged gradient; its norm is the one a single process computes for it."""
    runs = _ok(probes.run(_submission(probes), world_size=2))
    norms = [[g["norm"] for g in r["observed"]["grads"]] for r in runs]
    assert norms[0] == norms[1] and len(norms[0]) == 3
    model = probes.build_model()
    for rank in range(2):
        x = torch.randn(8, 16, generator=torch.Generator().manual_seed(rank))
        (model(x).square().mean() / 2).backward()
    want = float(torch.sqrt(sum((p.grad.double() ** 2).sum() for p in model.parameters())))
    assert norms[0][0] == pytest.approx(want, rel=1e-5)


def test_views_share_the_buckets_storage(probes: types.ModuleType) -> None:
    runs = _ok(probes.run(_submission(probes, bucket_cap_mb=0.25, gradient_as_bucket_view=True), world_size=2))
    for r in runs:
        assert r["observed"]["wrappers"] == [
            {
                "find_unused_parameters": False,
                "gradient_as_bucket_view": True,
                "static_graph": False,
                "bucket_bytes_cap": 262_144,
                "hooks": 0,  # no hook of the learner's: the grader's measuring hook is not counted
                "torch_hooks": 0,
                "none_states": 0,
            }
        ]
        assert _storage(r) == [
            {"grads": 8, "storages": 1, "own_bytes": 0},
            {"grads": 8, "storages": 3, "own_bytes": 0},
            {"grads": 8, "storages": 3, "own_bytes": 0},
        ]
        assert [s["calls"] for s in r["comm"]["per_step"]] == [1, 3, 3]


def test_copies_are_gradients_of_their_own(probes: types.ModuleType) -> None:
    runs = _ok(probes.run(_submission(probes, bucket_cap_mb=0.25), world_size=2))
    wrapper = runs[0]["observed"]["wrappers"][0]
    assert not wrapper["gradient_as_bucket_view"]
    assert _storage(runs[0]) == [{"grads": 8, "storages": 8, "own_bytes": MLP_BYTES}] * 3


def test_weights_come_back_as_raw_float32_without_the_probes_own_tensors(probes: types.ModuleType) -> None:
    runs = _ok(probes.run(_submission(probes, find_unused_parameters=True), world_size=2))
    state = runs[0]["state"]
    assert sorted(state) == sorted(probes.build_model().state_dict())
    weight = state["0.weight"]
    assert weight["dtype"] == "float32" and weight["shape"] == [256, 16] and len(weight["bytes"]) == 256 * 16 * 4
    back = torch.frombuffer(bytearray(weight["bytes"]), dtype=torch.float32).reshape(256, 16)
    rank1 = torch.frombuffer(bytearray(runs[1]["state"]["0.weight"]["bytes"]), dtype=torch.float32).reshape(256, 16)
    assert torch.equal(back, rank1)  # DDP kept the replicas identical
    assert not torch.equal(back, probes.build_model()[0].weight.detach())  # and they trained
    assert runs[0]["observed"]["wrappers"][0]["find_unused_parameters"] is True
    assert runs[0]["observed"]["wrappers"][0]["bucket_bytes_cap"] == 25 * 1024 * 1024  # DDP's default cap
