"""Record real framework failures (torch 2.13, TensorFlow 2.21) for the feedback classifier's tests.

Each case below is a small program that makes one known mistake and lets the framework raise; ``record()`` runs it
in a fresh interpreter and keeps the exception's type and message exactly as the framework wrote them.
``python -m tests.runner.failures.record`` rewrites ``recorded.json`` beside this file;
``tests/runner/test_feedback.py`` classifies every recording, and its slow test records a sample again to prove
the file still matches the installed frameworks.

Every case prints nothing and raises; the recorder reads the last exception from a JSON line the wrapper prints.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
RECORDED = HERE / "recorded.json"
WORKER_DIR = HERE.parents[2] / "worker"  # `runner` imports as the sandbox loads it, by its top-level name

# The wrapper: run the case, print its exception (or of the rank that failed) as one JSON line.
WRAPPER = """
import json, sys, os, traceback
def _report(exc):
    print("GPULAB-RECORDED " + json.dumps({"type": type(exc).__name__, "message": str(exc)}), flush=True)
try:
{body}
except BaseException as exc:
    _report(exc)
    sys.stdout.flush()
    os._exit(0)
print("GPULAB-RECORDED " + json.dumps(None))
"""

# Two gloo ranks as the DDP exercises run them (runner.vdev.ddp): rank 0's exception is reported.
RANKS = """
import os, torch, torch.distributed as dist
from runner.vdev import ddp
def train(rank, world_size):
    dist.init_process_group("gloo")
{body}
    return {{}}
res = ddp.run(train, world_size=2, timeout_s={timeout_s})
errs = [r.error for r in res if r.error is not None]
if errs:
    e = errs[0]
    print("GPULAB-RECORDED " + json.dumps({"type": e.type, "message": e.message}), flush=True)
    os._exit(0)
raise SystemExit("no rank raised")
"""

TORCH: dict[str, str] = {
    "torch.module_of_plain_model": "import torch\ntorch.nn.Linear(2, 2).module",
    "torch.dtype_matmul": "import torch\ntorch.ones(2, 2) @ torch.ones(2, 2, dtype=torch.bfloat16)",
    "torch.dtype_linear": "import torch\ntorch.nn.Linear(3, 2)(torch.ones(4, 3, dtype=torch.float64))",
    "torch.shape_matmul": "import torch\ntorch.nn.Linear(8, 2)(torch.ones(4, 3))",
    "torch.shape_broadcast": "import torch\ntorch.ones(3, 4).copy_(torch.ones(12))",
    "torch.no_grad_fn": "import torch\n(torch.ones(2) * 3).sum().backward()",
    "torch.backward_twice": textwrap.dedent("""\
        import torch
        w = torch.ones(2, requires_grad=True)
        y = (w.exp() * 2).sum()
        y.backward()
        y.backward()"""),
    "torch.context_manager_reused": textwrap.dedent("""\
        import torch
        forked = torch.random.fork_rng()
        with forked:
            pass
        with forked:
            pass"""),
    "torch.inplace_modified": textwrap.dedent("""\
        import torch
        w = torch.ones(2, requires_grad=True)
        h = w.sigmoid()
        h.mul_(2)
        h.sum().backward()"""),
    "torch.scaler_unscale_twice": textwrap.dedent("""\
        import torch
        m = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu")
        scaler.scale(m(torch.ones(1, 2)).sum()).backward()
        scaler.unscale_(opt)
        scaler.unscale_(opt)"""),
    "torch.scaler_no_inf_checks": textwrap.dedent("""\
        import torch
        m = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu")
        scaler.step(opt)"""),
    "torch.scaler_fp16_grads": textwrap.dedent("""\
        import torch
        m = torch.nn.Linear(2, 1).half()
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu")
        scaler.scale(m(torch.ones(1, 2, dtype=torch.float16)).float().sum()).backward()
        scaler.step(opt)"""),
    "torch.scaler_update_without_step": textwrap.dedent("""\
        import torch
        m = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu")
        scaler.scale(m(torch.ones(1, 2)).sum()).backward()
        opt.step()
        scaler.update()"""),
    "torch.scaler_step_without_update": textwrap.dedent("""\
        import torch
        m = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu")
        for _ in range(2):
            opt.zero_grad()
            scaler.scale(m(torch.ones(1, 2)).sum()).backward()
            scaler.unscale_(opt)
            scaler.step(opt)"""),
    "torch.autocast_no_device_type": "import torch\nwith torch.autocast(dtype=torch.bfloat16):\n    pass",
    "torch.no_process_group": "import torch, torch.distributed as dist\ndist.all_reduce(torch.ones(1))",
    "torch.ddp_no_process_group": textwrap.dedent("""\
        import torch
        torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 1))"""),
    "torch.sampler_no_process_group": textwrap.dedent("""\
        import torch
        from torch.utils.data.distributed import DistributedSampler
        DistributedSampler(list(range(8)))"""),
    "torch.cross_entropy_float_target": textwrap.dedent("""\
        import torch
        torch.nn.functional.cross_entropy(torch.randn(4, 3), torch.tensor([0.0, 1.0, 2.0, 1.0]))"""),
    "torch.loss_batch_mismatch": textwrap.dedent("""\
        import torch
        torch.nn.functional.cross_entropy(torch.randn(4, 3), torch.tensor([0, 1]))"""),
    "torch.load_state_dict_prefix": textwrap.dedent("""\
        import torch
        m = torch.nn.Linear(2, 1)
        m.load_state_dict({"module." + k: v for k, v in m.state_dict().items()})"""),
    "torch.load_state_dict_module": "import torch\ntorch.nn.BatchNorm1d(3).load_state_dict(torch.nn.BatchNorm1d(3))",
    "torch.cuda_not_compiled": "import torch\ntorch.ones(1).to('cuda:0')",
    "torch.cuda_set_device_cpu_build": "import torch\ntorch.cuda.set_device(0)",
    "torch.optimizer_empty": "import torch\ntorch.optim.SGD([], lr=0.1)",
    "torch.load_weights_only_object": textwrap.dedent("""\
        import argparse, io, torch
        buffer = io.BytesIO()
        torch.save({"epoch": 2, "args": argparse.Namespace(lr=0.05)}, buffer)
        buffer.seek(0)
        torch.load(buffer)"""),
    "torch.load_cuda_without_gpu": textwrap.dedent("""\
        import io, torch
        buffer = io.BytesIO()
        torch.save({"weight": torch.ones(2)}, buffer)
        buffer.seek(0)
        torch.load(buffer, map_location="cuda:0")"""),
    "torch.nccl_without_gpus": textwrap.dedent("""\
        import torch.distributed as dist
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:0", rank=0, world_size=1)"""),
    "torch.sampler_and_shuffle": textwrap.dedent("""\
        import torch
        from torch.utils.data import DataLoader, SequentialSampler, TensorDataset
        data = TensorDataset(torch.ones(4, 1))
        DataLoader(data, sampler=SequentialSampler(data), shuffle=True)"""),
    "torch.item_many": "import torch\ntorch.ones(3).item()",
    "torch.numpy_requires_grad": "import torch\ntorch.ones(2, requires_grad=True).numpy()",
    "torch.no_sync_on_module": "import torch\ntorch.nn.Sequential(torch.nn.Linear(2, 1)).no_sync()",
    "torch.with_uncalled_method": "import torch\nm = torch.nn.Linear(2, 1)\nwith m.train:\n    pass",
    "torch.virtual_device_mismatch": textwrap.dedent("""\
        from runner.vdev import torch_cuda
        torch_cuda.enable(2)
        import torch
        torch.nn.Linear(2, 1).to("cuda:1")(torch.ones(1, 2).to("cuda:0"))"""),
}

# Failures between ranks: a collective one rank leaves early, mismatched tensors, DDP misuse.
RANKS_TORCH: dict[str, tuple[str, float]] = {
    "torch.peer_left": (
        textwrap.dedent("""\
        if rank == 1:
            os._exit(0)
        dist.all_reduce(torch.ones(4))"""),
        20.0,
    ),
    "torch.peer_raised": (
        textwrap.dedent("""\
        if rank == 1:
            raise ValueError("rank one stops here")
        dist.all_reduce(torch.ones(4))"""),
        20.0,
    ),
    "torch.init_twice": ("dist.init_process_group('gloo')", 20.0),
    "torch.destroy_twice": ("dist.destroy_process_group()\ndist.destroy_process_group()", 20.0),
    "torch.collective_after_destroy": ("dist.destroy_process_group()\ndist.all_reduce(torch.ones(1))", 20.0),
    "torch.all_gather_object_result": (
        "gathered = dist.all_gather_object([None] * world_size, rank)\nsum(gathered)",
        20.0,
    ),
    "torch.collective_on_list": ("dist.all_reduce([1, 2])", 20.0),
    "torch.all_gather_unequal": (
        "dist.all_gather([torch.empty(2), torch.empty(1)], torch.ones(2 - rank))",
        20.0,
    ),
    "torch.ddp_no_params": ("torch.nn.parallel.DistributedDataParallel(torch.nn.ReLU())", 20.0),
    "torch.ddp_device_ids_cpu": (
        "torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 1), device_ids=[rank])",
        20.0,
    ),
    "torch.ddp_unused_parameters": (
        textwrap.dedent("""\
        m = torch.nn.ModuleDict({"a": torch.nn.Linear(2, 1), "b": torch.nn.Linear(2, 1)})
        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = m
            def forward(self, x):
                return self.m["a"](x)
        model = torch.nn.parallel.DistributedDataParallel(Net())
        for _ in range(2):
            model(torch.ones(1, 2)).sum().backward()"""),
        20.0,
    ),
    "torch.ddp_state_dict_keys": (
        textwrap.dedent("""\
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 1))
        torch.nn.Linear(2, 1).load_state_dict(model.state_dict())"""),
        20.0,
    ),
    "torch.ddp_hook_returns_tensor": (
        textwrap.dedent("""\
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 1))
        def hook(state, bucket):
            return bucket.buffer()
        model.register_comm_hook(None, hook)
        model(torch.ones(1, 2)).sum().backward()"""),
        20.0,
    ),
    "torch.fsdp_child_after_parent": (
        textwrap.dedent("""\
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh("cpu", (world_size,))
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
        fully_shard(model, mesh=mesh)
        fully_shard(model[0], mesh=mesh)
        model(torch.ones(2, 4)).sum().backward()"""),
        30.0,
    ),
}

TF: dict[str, str] = {
    "tf.input_shape": textwrap.dedent("""\
        import numpy as np, keras
        m = keras.Sequential([keras.Input((20,)), keras.layers.Dense(4)])
        m(np.ones((2, 10), "float32"))"""),
    "tf.variable_outside_scope": textwrap.dedent("""\
        import numpy as np, tensorflow as tf, keras
        tf.config.set_logical_device_configuration(tf.config.list_physical_devices("CPU")[0],
            [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])
        m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        s = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        with s.scope():
            m.compile(optimizer="sgd", loss="mse")
        m.fit(np.ones((8, 4), "float32"), np.ones((8, 1), "float32"), verbose=0)"""),
    "tf.not_compiled": textwrap.dedent("""\
        import numpy as np, keras
        m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        m.fit(np.ones((8, 4), "float32"), np.ones((8, 1), "float32"), verbose=0)"""),
    "tf.reduce_outside_run": textwrap.dedent("""\
        import tensorflow as tf
        s = tf.distribute.MirroredStrategy(["/cpu:0"])
        s.reduce("SUM", tf.constant(1.0), axis=None, extra=1)"""),
    "tf.bad_reduce_op": textwrap.dedent("""\
        import tensorflow as tf
        s = tf.distribute.MirroredStrategy(["/cpu:0"])
        s.reduce("TOTAL", tf.constant(1.0), axis=None)"""),
    "tf.mixed_strategies": textwrap.dedent("""\
        import tensorflow as tf
        a = tf.distribute.MirroredStrategy(["/cpu:0"])
        b = tf.distribute.OneDeviceStrategy("/cpu:0")
        with a.scope():
            with b.scope():
                pass"""),
    "tf.physical_device_name": textwrap.dedent("""\
        import tensorflow as tf
        tf.distribute.MirroredStrategy(devices=[tf.config.list_physical_devices("CPU")[0].name])"""),
    "tf.int_of_symbolic_tensor": textwrap.dedent("""\
        import tensorflow as tf
        @tf.function
        def f(x):
            return int(x)
        f(tf.constant(1.0))"""),
    "tf.numpy_of_symbolic_tensor": textwrap.dedent("""\
        import tensorflow as tf
        v = tf.Variable(3)
        @tf.function
        def f():
            return int(v) + 1
        f()"""),
    "tf.optimizer_outside_scope": textwrap.dedent("""\
        import tensorflow as tf, keras
        tf.config.set_logical_device_configuration(tf.config.list_physical_devices("CPU")[0],
            [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])
        s = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        with s.scope():
            m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
            m.compile(optimizer=keras.optimizers.SGD(momentum=0.9), loss="mse")
        m.optimizer.build(m.trainable_variables)"""),
    "tf.shard_args_swapped_first": textwrap.dedent("""\
        import tensorflow as tf
        tf.data.Dataset.range(16).shard(0, 2)"""),
    "tf.shard_args_swapped_second": textwrap.dedent("""\
        import tensorflow as tf
        tf.data.Dataset.range(16).shard(1, 2)"""),
    "tf.from_tensor_slices_list": textwrap.dedent("""\
        import numpy as np, tensorflow as tf
        tf.data.Dataset.from_tensor_slices([np.ones((4, 3), "float32"), np.ones(4, "int64")])"""),
    "tf.apply_gradients_nested_function": textwrap.dedent("""\
        import tensorflow as tf, keras
        tf.config.set_logical_device_configuration(tf.config.list_physical_devices("CPU")[0],
            [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])
        s = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        with s.scope():
            m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
            opt = keras.optimizers.SGD()
        @tf.function  # a tf.function inside the replica function: its graph is nested (so is an `if` on a tensor)
        def apply(grads):
            opt.apply_gradients(zip(grads, m.trainable_variables, strict=True))
        def step(x):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(m(x))
            apply(tape.gradient(loss, m.trainable_variables))
        tf.function(lambda x: s.run(step, args=(x,)))(tf.ones((2, 4)))"""),
    "tf.average_loss_of_a_mean": textwrap.dedent("""\
        import tensorflow as tf, keras
        per_example = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(tf.constant([0, 1]), tf.ones((2, 3)))
        tf.nn.compute_average_loss(per_example, global_batch_size=4)"""),
    "tf.model_on_per_replica": textwrap.dedent("""\
        import numpy as np, tensorflow as tf, keras
        tf.config.set_logical_device_configuration(tf.config.list_physical_devices("CPU")[0],
            [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])
        s = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        with s.scope():
            m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        d = s.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices(np.ones((8, 4), "float32")).batch(4))
        m(next(iter(d)))"""),
    "tf.batch_size_zero": textwrap.dedent("""\
        import tensorflow as tf
        tf.data.Dataset.range(8).batch(4 * 0)"""),
    "tf.keras_save_folder": textwrap.dedent("""\
        import tempfile, keras
        m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        m.save(tempfile.mkdtemp())  # a folder, not a .keras file"""),
}


def _indent(code: str) -> str:
    return textwrap.indent(code, "    ")


def program(case: str) -> str:
    """Return the program that makes ``case``'s mistake and prints its exception as a JSON line."""
    if case in RANKS_TORCH:
        body, timeout_s = RANKS_TORCH[case]
        return "import json\n" + RANKS.replace("{body}", _indent(body)).replace("{timeout_s}", repr(timeout_s))
    code = TORCH.get(case) or TF[case]
    return WRAPPER.replace("{body}", _indent(code))


def cases() -> list[str]:
    return [*TORCH, *RANKS_TORCH, *TF]


def record(case: str, *, python: str = sys.executable, timeout_s: float = 120.0) -> dict[str, str]:
    """Run ``case`` in a fresh interpreter and return ``{"type", "message"}`` as the framework raised it."""
    env = {"PYTHONPATH": str(WORKER_DIR), "TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin", "HOME": "/tmp"}
    done = subprocess.run(
        [python, "-c", program(case)], capture_output=True, text=True, timeout=timeout_s, env=env, check=False
    )
    for line in done.stdout.splitlines():
        if line.startswith("GPULAB-RECORDED "):
            found = json.loads(line.removeprefix("GPULAB-RECORDED "))
            if found is None:
                raise RuntimeError(f"{case}: the program raised nothing")
            return found
    raise RuntimeError(f"{case}: no recording (exit {done.returncode}): {done.stderr[-2000:]}")


def main() -> None:
    with ThreadPoolExecutor(max_workers=2) as pool:
        found = dict(zip(cases(), pool.map(record, cases()), strict=True))
    RECORDED.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"recorded {len(found)} failures into {RECORDED}")


if __name__ == "__main__":
    main()
