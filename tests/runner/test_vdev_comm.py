"""Communication measurements in DDP ranks (runner.vdev.comm) against hand-computed counts and bytes.

Real DistributedDataParallel over gloo in two forked ranks (``ddp.run(..., measure=True)``). The figures are
computed by hand from the models: ``Linear(4, 8), Tanh, Linear(8, 1)`` has 4 * 8 + 8 + 8 + 1 = 49 float32
parameters, 196 bytes, one DDP bucket; two ``Linear(256, 256)`` have 2 * (65,536 + 256) = 131,584, 526,336 bytes
(exercises/FACTS.md P19, P20).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytest.importorskip("torch._dynamo")  # warm: forked ranks then start in ~0.1 s, not seconds

from worker.runner.vdev import ddp  # noqa: E402

torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
pytestmark = pytest.mark.slow
SMALL_BYTES = 49 * 4
LAYER_BYTES = (256 * 256 + 256) * 4


def _small() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def train_accumulating(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    """3 steps, each of two micro-batches: the first under no_sync; then one all_reduce and one broadcast."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")
    model = DistributedDataParallel(_small())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(rank))
    for _ in range(3):
        with model.no_sync():
            model(x[:4]).square().mean().backward()
        model(x[4:]).square().mean().backward()
        opt.step()
        opt.zero_grad()
    dist.all_reduce(torch.ones(2))  # float32: 8 bytes
    dist.broadcast(torch.ones(3, dtype=torch.float64), src=0)  # 24 bytes
    dist.destroy_process_group()
    return dict(model.module.state_dict())


def train_buckets(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Tanh(), torch.nn.Linear(256, 256))
    model = DistributedDataParallel(net, bucket_cap_mb=0.25)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(8, 256, generator=torch.Generator().manual_seed(rank))
    for _ in range(3):
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad()
    dist.destroy_process_group()
    return {"w": net[0].weight[:1]}


def train_fp16_hook(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")
    model = DistributedDataParallel(_small())
    model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(4, 4, generator=torch.Generator().manual_seed(rank))
    for _ in range(2):
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad()
    dist.destroy_process_group()
    return dict(model.module.state_dict())


def _comm(train, measure: bool = True) -> list[ddp.RankResult]:
    results = ddp.run(train, world_size=2, timeout_s=60.0, measure=measure)
    assert all(r.ok for r in results), [r.describe() for r in results]
    return results


def test_no_sync_window_costs_one_allreduce_of_the_parameters() -> None:
    for r in _comm(train_accumulating):
        comm = r.comm
        assert comm is not None
        assert comm["steps"] == 3
        assert [(w["calls"], w["bytes"]) for w in comm["per_step"]] == [(1, SMALL_BYTES)] * 3
        assert [w["samples"] for w in comm["per_step"]] == [8, 8, 8]
        assert (comm["tail"]["calls"], comm["tail"]["bytes"]) == (2, 8 + 24)
        assert comm["ops"] == {
            "allreduce": {"calls": 4, "bytes": 3 * SMALL_BYTES + 8},
            "broadcast": {"calls": 1, "bytes": 24},
        }
        steps = [[i, "allreduce", SMALL_BYTES] for i in range(3)]
        assert comm["calls"] == [*steps, [3, "allreduce", 8], [3, "broadcast", 24]]
        assert comm["ddp_default_hooks"] == 1 and comm["own_hooks"] == 0
        assert all(w["compute_s"] >= 0 for w in comm["per_step"])


def test_buckets_follow_bucket_cap_after_the_first_step() -> None:
    comm = _comm(train_buckets)[0].comm
    assert comm is not None
    # Step 1: one bucket (the first bucket's cap is 1 MiB); from step 2 on, rebuilt: one bucket per layer.
    by_step = [[nbytes for step, _op, nbytes in comm["calls"] if step == i] for i in range(3)]
    assert by_step == [[2 * LAYER_BYTES], [LAYER_BYTES, LAYER_BYTES], [LAYER_BYTES, LAYER_BYTES]]


def test_a_learners_own_hook_is_counted_as_it_communicates() -> None:
    comm = _comm(train_fp16_hook)[0].comm
    assert comm is not None
    assert [(w["calls"], w["bytes"]) for w in comm["per_step"]] == [(1, SMALL_BYTES // 2)] * 2  # float16 halves it
    assert comm["own_hooks"] == 1 and comm["ddp_default_hooks"] == 0


def test_measuring_does_not_change_the_training() -> None:
    measured = _comm(train_accumulating)[0]
    plain = _comm(train_accumulating, measure=False)[0]
    assert plain.comm is None
    assert measured.state.keys() == plain.state.keys()
    for key in plain.state:
        assert (measured.state[key] == plain.state[key]).all(), f"{key} differs with the Python twin of DDP's hook"


def train_hook_after_forward(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    """Register the fp16 hook after the first forward, before its backward, as DDP's docs allow."""
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")
    model = DistributedDataParallel(_small())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(4, 4, generator=torch.Generator().manual_seed(rank))
    for step in range(2):
        loss = model(x).square().mean()
        if step == 0:
            model.register_comm_hook(None, default_hooks.fp16_compress_hook)
        loss.backward()
        opt.step()
        opt.zero_grad()
    dist.destroy_process_group()
    return dict(model.module.state_dict())


def test_a_hook_registered_after_the_first_forward_replaces_the_twin() -> None:
    comm = _comm(train_hook_after_forward)[0].comm
    assert comm is not None
    assert [(w["calls"], w["bytes"]) for w in comm["per_step"]] == [(1, SMALL_BYTES // 2)] * 2
    assert comm["own_hooks"] == 1 and comm["ddp_default_hooks"] == 1
