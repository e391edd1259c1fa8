"""Communication measurements in DDP ranks (runner.vdev.comm) against hand-computed counts and bytes.

Real DistributedDataParallel over gloo in two forked ranks (``ddp.run(..., measure=True)``). The figures are
computed by hand from the models: ``Linear(4, 8), Tanh, Linear(8, 1)`` has 4 * 8 + 8 + 8 + 1 = 49 float32
parameters, 196 bytes, one DDP bucket; two ``Linear(256, 256)`` have 2 * (65,536 + 256) = 131,584, 526,336 bytes
(exercises/FACTS.md P19, P20).
"""

from __future__ import annotations

import contextlib

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
        # DDP's all-reduces run in backward; the learner's own all_reduce and broadcast after training do not.
        assert [(w["backward_calls"], w["backward_bytes"]) for w in comm["per_step"]] == [(1, SMALL_BYTES)] * 3
        assert (comm["tail"]["backward_calls"], comm["tail"]["backward_bytes"]) == (0, 0)
        assert comm["ops_outside_backward"] == {
            "allreduce": {"calls": 1, "bytes": 8},
            "broadcast": {"calls": 1, "bytes": 24},
        }
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
    assert [w["backward_calls"] for w in comm["per_step"]] == [1, 1] and comm["ops_outside_backward"] == {}
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


def test_bytes_are_summed_by_dtype() -> None:
    accumulating = _comm(train_accumulating)[0].comm
    fp16 = _comm(train_fp16_hook)[0].comm
    assert accumulating is not None and fp16 is not None
    assert accumulating["dtypes"] == {"float32": 3 * SMALL_BYTES + 8, "float64": 24}
    assert fp16["dtypes"] == {"float16": 2 * (SMALL_BYTES // 2)}


def train_refused_hook(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    """Try torch's bf16 hook, which DDP refuses on a CPU build, then train on without a hook."""
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")
    model = DistributedDataParallel(_small())
    with contextlib.suppress(TypeError):  # "BF16 all reduce communication hook required CUDA 11+ and NCCL 2.10+"
        model.register_comm_hook(None, default_hooks.bf16_compress_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(4, 4, generator=torch.Generator().manual_seed(rank))
    for _ in range(2):
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad()
    dist.destroy_process_group()
    return dict(model.module.state_dict())


@pytest.mark.skipif(torch.cuda.is_available(), reason="DDP accepts the bf16 hook where CUDA and NCCL are available")
def test_a_refused_hook_leaves_ddps_own_reduction_counted() -> None:
    comm = _comm(train_refused_hook)[0].comm
    assert comm is not None
    assert [(w["calls"], w["bytes"]) for w in comm["per_step"]] == [(1, SMALL_BYTES)] * 2
    assert comm["dtypes"] == {"float32": 2 * SMALL_BYTES}
    assert comm["ddp_default_hooks"] == 1 and comm["own_hooks"] == 0


# torch-ddp-comm-tuning's model: Linear(16, 256), Tanh, Linear(256, 256), Tanh, Linear(256, 256), Tanh,
# Linear(256, 1). Its parameter tensors hold 4,096, 256, 65,536, 256, 65,536, 256, 256 and 1 float32 values:
# 136,193 in all, 544,772 bytes. From step 2 on DDP's buckets follow the gradients' ready order (last layer first)
# and close once they hold at least the cap; 0.25 MiB (262,144 bytes) gives (257 + 65,792) * 4 = 264,196,
# 65,792 * 4 = 263,168 and 4,352 * 4 = 17,408 bytes. Under find_unused_parameters=True the constructor already
# applies the cap, in parameter order (4,352 + 65,536 values = 279,552 bytes; 256 + 65,536 = 263,168; 256 + 256 + 1
# = 2,052), and never rebuilds (exercises/FACTS.md P23, P27).
MLP_BYTES = 544_772
MLP_BUCKETS = [264_196, 263_168, 17_408]


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    nn = torch.nn
    return nn.Sequential(
        nn.Linear(16, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 1)
    )


def _bf16_hook(state, bucket):  # type: ignore[no-untyped-def]
    import torch.distributed as dist

    buffer = bucket.buffer()
    compressed = buffer.to(torch.bfloat16).div_(dist.get_world_size())
    return dist.all_reduce(compressed, async_op=True).get_future().then(lambda f: buffer.copy_(f.value()[0]))


def _train_mlp(options: dict, hook: bool = False):  # type: ignore[no-untyped-def]
    def train(rank: int, world_size: int) -> dict[str, torch.Tensor]:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        dist.init_process_group("gloo")
        model = DistributedDataParallel(_mlp(), **options)
        if hook:
            model.register_comm_hook(None, _bf16_hook)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        x = torch.randn(8, 16, generator=torch.Generator().manual_seed(rank))
        for _ in range(3):
            model(x).square().mean().backward()
            opt.step()
            opt.zero_grad()
        dist.destroy_process_group()
        return {"w": model.module[0].weight[:1]}

    return train


def _calls_by_step(comm: dict, steps: int = 3) -> list[list[int]]:
    return [[nbytes for step, _op, nbytes in comm["calls"] if step == i] for i in range(steps)]


def test_a_quarter_mib_cap_gives_three_buckets_from_step_two() -> None:
    comm = _comm(_train_mlp({"bucket_cap_mb": 0.25}))[0].comm
    assert comm is not None
    assert _calls_by_step(comm) == [[MLP_BYTES], MLP_BUCKETS, MLP_BUCKETS]


def test_a_bf16_hook_halves_every_bucket_but_keeps_the_layout() -> None:
    comm = _comm(_train_mlp({"bucket_cap_mb": 0.25, "gradient_as_bucket_view": True}, hook=True))[0].comm
    assert comm is not None
    halves = [b // 2 for b in MLP_BUCKETS]
    assert _calls_by_step(comm) == [[MLP_BYTES // 2], halves, halves]
    assert comm["dtypes"] == {"bfloat16": MLP_BYTES // 2 * 3}


def test_a_cap_given_in_bytes_is_read_as_mib() -> None:
    comm = _comm(_train_mlp({"bucket_cap_mb": 262_144}))[0].comm  # 256 GiB
    assert comm is not None
    assert _calls_by_step(comm) == [[MLP_BYTES]] * 3


def test_find_unused_parameters_keeps_the_constructors_buckets() -> None:
    comm = _comm(_train_mlp({"bucket_cap_mb": 0.25, "find_unused_parameters": True}))[0].comm
    assert comm is not None
    assert _calls_by_step(comm) == [[2_052, 263_168, 279_552]] * 3


def train_fsdp2(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    """Two steps of two Linear(8, 8) layers, each sharded with FSDP2's fully_shard, then the root."""
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 8))
    fully_shard(net[0])
    fully_shard(net[2])
    fully_shard(net)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(rank))
    for _ in range(2):
        net(x).square().mean().backward()
        opt.step()
        opt.zero_grad()
    dist.destroy_process_group()
    return {"w": net[0].weight.to_local().detach()}


def test_fsdp2_all_gathers_and_reduce_scatters_are_counted() -> None:
    # Each layer: 8 * 8 + 8 = 72 float32 values, 288 bytes; a rank sends its half (144 bytes) to each all-gather
    # (forward, then again in backward) and the layer's whole gradients (288 bytes) to its reduce-scatter.
    comm = _comm(train_fsdp2)[0].comm
    assert comm is not None
    assert comm["steps"] == 2
    assert comm["ops"] == {
        "all_gather_single": {"calls": 8, "bytes": 8 * 144},
        "reduce_scatter_single": {"calls": 4, "bytes": 4 * 288},
    }
