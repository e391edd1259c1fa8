"""Virtual CUDA on a CPU build of torch: device bookkeeping, real error texts, and DataParallel."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from worker.runner import vdev  # noqa: E402
from worker.runner.vdev import torch_cuda as vc  # noqa: E402

pytestmark = pytest.mark.slow

MIXED = "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"


@pytest.fixture(autouse=True)
def virtual_cuda() -> Iterator[None]:
    if torch.backends.cuda.is_built():
        pytest.skip("virtual CUDA is for CPU builds")
    vc.enable(2)
    yield
    vc.disable()


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
        self.register_buffer("scale", torch.ones(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x) * self.scale


MOVES: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], int]] = {
    ".cuda()": (lambda t: t.cuda(), 0),
    ".cuda(1)": (lambda t: t.cuda(1), 1),
    ".to('cuda')": (lambda t: t.to("cuda"), 0),
    ".to('cuda:1')": (lambda t: t.to("cuda:1"), 1),
    ".to(torch.device('cuda', 0))": (lambda t: t.to(torch.device("cuda", 0)), 0),
    ".to(device='cuda:1')": (lambda t: t.to(device="cuda:1"), 1),
    ".to(1)": (lambda t: t.to(1), 1),
    ".to('cuda', torch.float64)": (lambda t: t.to("cuda", torch.float64), 0),
    ".to(other)": (lambda t: t.to(torch.zeros(1).cuda(1)), 1),
    "zeros(device='cuda')": (lambda t: torch.zeros(2, device="cuda"), 0),
    "tensor(device='cuda:1')": (lambda t: torch.tensor([1.0, 2.0], device="cuda:1"), 1),
    "zeros_like(device=cuda:1)": (lambda t: torch.zeros_like(t, device=torch.device("cuda:1")), 1),
}


@pytest.mark.parametrize("spelling", list(MOVES))
def test_each_spelling_moves_a_tensor_and_leaves_the_original(spelling: str) -> None:
    x = torch.ones(3, 2)
    move, idx = MOVES[spelling]
    y = move(x)
    assert y.device == torch.device("cuda", idx)
    assert y.is_cuda and y.get_device() == idx and not y.is_cpu
    assert x.device == torch.device("cpu") and not x.is_cuda
    assert y.cpu().device.type == "cpu"


def test_torch_cuda_reports_two_virtual_devices() -> None:
    assert torch.cuda.is_available()
    assert torch.cuda.device_count() == 2
    assert torch.cuda.current_device() == 0
    assert torch.cuda.get_device_name(1) == "virtual CUDA (CPU)"
    assert torch.cuda.get_device_properties(0).total_memory > 0
    torch.cuda.set_device(1)
    assert torch.zeros(1, device="cuda").device == torch.device("cuda", 1)
    with torch.cuda.device(0):
        assert torch.ones(1).cuda().get_device() == 0
    torch.cuda.synchronize()
    torch.cuda.manual_seed_all(0)
    with pytest.raises(RuntimeError, match="invalid device ordinal"):
        torch.ones(1).to("cuda:2")
    assert vdev.setup("torch", 2) == "2 virtual CUDA devices (CPU)"


def test_results_and_grads_carry_the_device_and_mixing_raises_the_real_error() -> None:
    model = nn.Linear(2, 1).cuda()
    assert model.weight.device == torch.device("cuda:0")
    with pytest.raises(RuntimeError) as info:
        model(torch.ones(3, 2))
    assert str(info.value) == MIXED
    x = torch.ones(3, 2).cuda()
    out = model(x)
    assert out.device.type == "cuda" and out[0].device.type == "cuda" and out.T.is_cuda
    (out * torch.tensor(2.0)).sum().backward()  # a 0-dim CPU tensor mixes, as in real torch
    assert model.weight.grad is not None and model.weight.grad.device == torch.device("cuda:0")
    with pytest.raises(RuntimeError, match="cuda:1 and cpu"):
        torch.ones(2).cuda(1) + torch.ones(2)
    with pytest.raises(RuntimeError, match="found at least two devices, cuda:0 and cuda:1!"):
        torch.cat([torch.ones(1).cuda(0), torch.ones(1).cuda(1)])
    with pytest.raises(TypeError, match=r"Use Tensor\.cpu"):
        x.numpy()
    assert "device='cuda:0'" in repr(out)
    assert x.type() == "torch.cuda.FloatTensor"


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_optimizers_step_on_virtual_devices(optimizer: str) -> None:
    model = Net().to("cuda")
    opt = (
        torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        if optimizer == "sgd"
        else torch.optim.Adam(model.parameters(), lr=0.01)
    )
    x, y = torch.randn(16, 4).cuda(), torch.randn(16, 1).cuda()
    losses = []
    for _ in range(5):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    assert all(p.is_cuda for p in model.parameters())
    assert model.scale.is_cuda


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_one_optimizer_steps_parameters_split_over_two_devices(optimizer: str) -> None:
    first, second = nn.Linear(4, 8).to("cuda:0"), nn.Linear(8, 1).to("cuda:1")
    params = [*first.parameters(), *second.parameters()]
    opt = torch.optim.SGD(params, lr=0.1, momentum=0.9) if optimizer == "sgd" else torch.optim.Adam(params, lr=0.01)
    x, y = torch.randn(16, 4).to("cuda:0"), torch.randn(16, 1).to("cuda:1")
    losses = []
    for _ in range(5):
        opt.zero_grad()
        loss = nn.functional.mse_loss(second(first(x).to("cuda:1")), y)
        loss.backward()
        opt.step()  # foreach ops get both devices' tensors in one call: each position keeps its own device
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    assert [p.get_device() for p in params] == [0, 0, 1, 1]
    assert [p.grad.get_device() for p in params] == [0, 0, 1, 1]
    with pytest.raises(RuntimeError, match="found at least two devices, cuda:0 and cuda:1!"):
        torch._foreach_add_([first.weight.detach()], [torch.zeros(8, 4, device="cuda:1")])


def _reference_grads(model: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    vc.disable()
    try:
        model.zero_grad()
        model(x).pow(2).sum().backward()
        return [p.grad.clone() for p in model.parameters()]
    finally:
        vc.enable(2)


def test_data_parallel_splits_over_two_devices_and_sums_grads() -> None:
    torch.manual_seed(0)
    net = Net()
    x = torch.randn(5, 4)  # 5 rows: chunks of 3 and 2, as torch.chunk cuts them
    expected = _reference_grads(net, x)
    vc.enable(2)
    dp = nn.DataParallel(net)
    assert isinstance(dp, nn.DataParallel)
    assert dp.device_ids == [0, 1] and dp.output_device == 0
    dp.cuda()
    seen: list[tuple[int, torch.device]] = []
    net.body.register_forward_hook(lambda m, i, o: seen.append((i[0].shape[0], i[0].device)))
    net.zero_grad()
    out = dp(x.cuda())
    assert out.device == torch.device("cuda:0") and out.shape == (5, 1)
    assert seen == [(3, torch.device("cuda:0")), (2, torch.device("cuda:1"))]
    out.pow(2).sum().backward()
    for p, want in zip(net.parameters(), expected, strict=True):
        assert p.grad is not None and p.grad.device == torch.device("cuda:0")
        torch.testing.assert_close(p.grad.cpu(), want)
    assert all(k.startswith("module.") for k in dp.state_dict())


def test_data_parallel_without_moving_raises_the_real_check() -> None:
    dp = nn.DataParallel(Net())
    with pytest.raises(RuntimeError) as info:
        dp(torch.randn(4, 4))
    assert str(info.value) == (
        "module must have its parameters and buffers on device cuda:0 (device_ids[0]) "
        "but found one of them on device: cpu"
    )


def test_data_parallel_on_the_wrong_device_raises_the_real_check() -> None:
    dp = nn.DataParallel(Net().to("cuda:1"))
    with pytest.raises(RuntimeError, match="found one of them on device: cuda:1"):
        dp(torch.randn(4, 4).cuda())


def test_data_parallel_output_device_and_replica_errors() -> None:
    dp = nn.DataParallel(Net().cuda(), output_device=1)
    assert dp(torch.randn(4, 4).cuda()).device == torch.device("cuda:1")

    class Picky(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if x.get_device() == 1:
                raise ValueError("no odd devices")
            return x

    with pytest.raises(ValueError, match="Caught ValueError in replica 1 on device 1"):
        nn.DataParallel(Picky())(torch.randn(4, 2).cuda())


def test_data_parallel_with_batchnorm_updates_statistics_from_device0() -> None:
    net = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)).cuda()
    dp = nn.DataParallel(net)
    dp(torch.randn(8, 4).cuda()).sum().backward()
    assert net[1].num_batches_tracked.item() == 1
    assert net[1].running_mean.device == torch.device("cuda:0")


def test_moves_record_what_the_learner_did() -> None:
    vc.reset_moves()
    model = Net()
    model.cuda()
    x = torch.ones(2, 4).to("cuda:1")
    x.cpu()
    assert vc.moves() == [
        vc.Move("module Net", "cpu", "cuda:0"),
        vc.Move("tensor", "cpu", "cuda:1"),
        vc.Move("tensor", "cuda:1", "cpu"),
    ]


def test_disable_restores_torch() -> None:
    moved = nn.Linear(2, 1).cuda()
    originals = {name: getattr(nn.DataParallel, name) for name in ("scatter", "gather")}
    vc.disable()
    assert not torch.cuda.is_available() and torch.cuda.device_count() == 0
    assert moved.weight.device == torch.device("cpu")
    assert nn.DataParallel(nn.Linear(2, 1)).device_ids == []
    assert all(getattr(nn.DataParallel, n) is not f for n, f in originals.items())
    assert "to" not in vars(nn.Linear)
    vc.enable(2)
    assert nn.DataParallel(nn.Linear(2, 1)).device_ids == [0, 1]


FORK_SCRIPT = """
import os, sys, time
import torch
from runner import vdev
vdev.setup("torch", 2)
threads = len(os.listdir("/proc/self/task"))
t = time.monotonic()
pid = os.fork()
if pid == 0:
    a = torch.randn(128, 128).cuda()
    torch.nn.Linear(128, 1).cuda()(a @ a).sum().backward()
    os._exit(0)
_, status = os.waitpid(pid, 0)
print(threads, os.waitstatus_to_exitcode(status), round(time.monotonic() - t, 3))
"""


def test_children_forked_after_setup_run_matmuls() -> None:
    # A fresh interpreter: this one already ran multi-threaded ops, after which forked children hang.
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "worker")}
    proc = subprocess.run([sys.executable, "-c", FORK_SCRIPT], capture_output=True, text=True, env=env, timeout=60)
    threads, code, seconds = proc.stdout.split()
    assert code == "0", proc.stderr[-2000:]
    assert float(seconds) < 5
    assert threads == "2"  # the main thread and the one `import torch` starts; setup adds none
