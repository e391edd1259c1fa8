"""The feedback classifier against real framework failures (``tests/runner/failures/recorded.json``).

Every recorded failure of torch 2.13 and TensorFlow 2.21 is explained by its class's sentence, shows no
internals, and keeps the framework's text as details; the slow test records a sample again, so the file cannot
drift from the installed frameworks.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.runner.failures import record
from worker.runner import feedback

RECORDED: dict[str, dict[str, str]] = json.loads(record.RECORDED.read_text(encoding="utf-8"))

# The class each recorded mistake must be told as ("": none, the exception is the learner's own or too generic to
# name a cause).
EXPECTED = {
    "torch.dtype_matmul": "dtype.mismatch",
    "torch.dtype_linear": "dtype.mismatch",
    "torch.shape_matmul": "shape.matmul",
    "torch.shape_broadcast": "shape.broadcast",
    "torch.no_grad_fn": "autograd.no_graph",
    "torch.backward_twice": "autograd.backward_twice",
    "torch.inplace_modified": "autograd.inplace",
    "torch.context_manager_reused": "python.context_manager_reused",
    "torch.scaler_unscale_twice": "scaler.unscale_twice",
    "torch.scaler_no_inf_checks": "scaler.not_scaled",
    "torch.scaler_fp16_grads": "scaler.fp16_parameters",
    "torch.scaler_update_without_step": "scaler.update_without_step",
    "torch.scaler_step_without_update": "scaler.step_without_update",
    "torch.autocast_no_device_type": "autocast.no_device_type",
    "torch.no_process_group": "process_group.missing",
    "torch.ddp_no_process_group": "process_group.missing",
    "torch.sampler_no_process_group": "process_group.missing",
    "torch.cross_entropy_float_target": "loss.target_dtype",
    "torch.loss_batch_mismatch": "loss.batch_mismatch",
    "torch.load_state_dict_prefix": "state_dict.module_prefix",
    "torch.load_state_dict_module": "state_dict.not_a_mapping",
    "torch.cuda_not_compiled": "device.no_cuda",
    "torch.cuda_set_device_cpu_build": "device.no_cuda",
    "torch.optimizer_empty": "optimizer.no_parameters",
    "torch.load_weights_only_object": "torch_load.weights_only",
    "torch.load_cuda_without_gpu": "torch_load.cuda_without_gpu",
    "torch.nccl_without_gpus": "process_group.no_nccl",
    "torch.sampler_and_shuffle": "dataloader.sampler_and_shuffle",
    "torch.item_many": "tensor.item_of_many",
    "torch.numpy_requires_grad": "tensor.numpy_requires_grad",
    "torch.no_sync_on_module": "ddp.no_sync_elsewhere",
    "torch.with_uncalled_method": "python.with_uncalled_method",
    "torch.virtual_device_mismatch": "device.mismatch",
    "torch.peer_left": "collective.peer_gone",
    "torch.peer_raised": "",
    "torch.init_twice": "process_group.twice",
    "torch.destroy_twice": "process_group.destroyed_twice",
    "torch.collective_after_destroy": "process_group.missing",
    "torch.all_gather_object_result": "python.none_not_iterable",
    "torch.all_gather_unequal": "allgather.unequal_sizes",
    "torch.collective_on_list": "dist.not_a_tensor",
    "torch.ddp_no_params": "ddp.no_parameters",
    "torch.ddp_device_ids_cpu": "ddp.device_ids_on_cpu",
    "torch.ddp_unused_parameters": "ddp.unused_parameters",
    "torch.ddp_state_dict_keys": "state_dict.module_prefix",
    "torch.ddp_hook_returns_tensor": "ddp.hook_not_future",
    "torch.fsdp_child_after_parent": "fsdp.child_after_parent",
    "tf.input_shape": "keras.input_shape",
    "tf.variable_outside_scope": "",
    "tf.not_compiled": "keras.not_compiled",
    "tf.reduce_outside_run": "",
    "tf.bad_reduce_op": "tf.reduce_op",
    "tf.mixed_strategies": "keras.mixed_strategies",
    "tf.optimizer_outside_scope": "tf.outside_strategy_scope",
    "tf.shard_args_swapped_first": "tf.shard_count",
    "tf.shard_args_swapped_second": "tf.shard_index",
    "tf.from_tensor_slices_list": "tf.non_rectangular_list",
    "tf.apply_gradients_nested_function": "tf.sync_in_nested_graph",
    "tf.average_loss_of_a_mean": "tf.average_loss_scalar",
    "tf.model_on_per_replica": "keras.per_replica_input",
    "tf.batch_size_zero": "tf.batch_size_not_positive",
    "tf.keras_save_folder": "keras.save_extension",
    "tf.physical_device_name": "tf.physical_device_name",
    "tf.int_of_symbolic_tensor": "tf.python_number_of_graph_tensor",
    "tf.numpy_of_symbolic_tensor": "tf.numpy_of_graph_tensor",
    "torch.module_of_plain_model": "wrapper.module_elsewhere",
}


def test_every_recording_has_an_expected_class() -> None:
    assert set(EXPECTED) == set(RECORDED) == set(record.cases())


@pytest.mark.parametrize("case", sorted(RECORDED))
def test_a_recorded_failure_is_told_by_its_class_with_no_internals(case: str) -> None:
    raw = RECORDED[case]
    got = feedback.explain(raw["type"], raw["message"])
    assert got.cause == EXPECTED[case], (case, got)
    assert feedback.internals(got.message) == [], (case, got.message)
    assert got.message[:1].isupper() and got.message.endswith("."), got.message  # a sentence, not a fragment
    if got.cause:  # the framework's own words stay behind the disclosure, cleaned of terminal codes
        assert got.details.startswith(f"{raw['type']}: ") and "\x1b[" not in got.details
        assert not got.message.startswith("Your code raised")


def test_values_of_the_failure_are_quoted_in_the_learners_terms() -> None:
    dtype = RECORDED["torch.dtype_matmul"]
    assert "(float32 and bfloat16)" in feedback.explain(dtype["type"], dtype["message"]).message
    ids = RECORDED["torch.ddp_device_ids_cpu"]
    assert "device_ids=[0]" in feedback.explain(ids["type"], ids["message"]).message
    shape = RECORDED["tf.input_shape"]
    assert (
        "expects 20 values on axis -1, and got shape (2, 10)"
        in feedback.explain(shape["type"], shape["message"]).message
    )


def test_an_unknown_exception_is_the_learners_own_first_line() -> None:
    got = feedback.explain("ValueError", "n_devices must be positive\nmore lines")
    assert got == feedback.Explained(
        "Your code raised ValueError: n_devices must be positive.", "ValueError: n_devices must be positive\nmore lines"
    )
    assert feedback.explain("AssertionError", "").message == "Your code raised AssertionError (with no message)."
    assert feedback.raised("train(0, 2)", "KeyError", "'x'").message == "train(0, 2) raised KeyError: 'x'."


def test_tensorflows_graph_wrappers_never_reach_the_sentence() -> None:
    wrapped = (
        "{{function_node __wrapped__Reshape_device_/job:localhost/replica:0/task:0/device:CPU:0}} Input to reshape is "
        "a tensor with 12 values, but the requested shape has 10 [Op:Reshape] name: "
    )
    got = feedback.explain("InvalidArgumentError", wrapped)
    assert got.message == (
        "Your code raised InvalidArgumentError: Input to reshape is a tensor with 12 values, but the requested shape "
        "has 10."
    )
    assert "[Op:Reshape]" in got.details  # the framework's own text stays behind the disclosure
    renamed = "outer_factory.<locals>.inner_factory.<locals>.tf__step_fn() takes 1 positional argument but 2 were given"
    told = feedback.raised("train_worker", "TypeError", renamed)
    assert told.message == "train_worker raised TypeError: step_fn() takes 1 positional argument but 2 were given."
    node = "Incompatible shapes: [4] vs. [2] for '{{node add}} = AddV2[T=DT_FLOAT](x, y)' with input shapes: [4], [2]."
    assert "{{node" not in feedback.first_line(node)
    assert feedback.internals(renamed) and feedback.internals(wrapped)
    assert feedback.internals(feedback.explain("InvalidArgumentError", wrapped).message) == []


def test_details_of_a_tf_function_keep_only_the_learners_frames() -> None:
    report = (
        "in user code:\n\n"
        '    File "/job/probes/probes.py", line 6, in step  *\n        return submission.loss_of(x)\n'
        '    File "/job/submission/submission.py", line 3, in loss_of  *\n'
        "        return tf.reshape(x, (3, 5)) * undefined_name\n"
        '    File "/usr/lib/python3/site-packages/keras/src/layers/layer.py", line 900, in __call__  **\n'
        "        outputs = super().__call__(inputs)\n\n"
        "    NameError: name 'undefined_name' is not defined\n"
    )
    got = feedback.clean_details(report)
    assert "probes.py" not in got and "site-packages" not in got and "super().__call__" not in got
    assert 'File "/job/submission/submission.py", line 3' in got and "* undefined_name" in got
    assert got.endswith("NameError: name 'undefined_name' is not defined")
    assert feedback.clean_details('File "/x/probes.py", line 1') == 'File "/x/probes.py", line 1'  # other texts kept


def test_ranks_name_the_rank_that_failed_first_and_the_others_as_consequences() -> None:
    left = RECORDED["torch.peer_left"]
    runs = [
        {"rank": 0, "error": {"type": left["type"], "message": left["message"]}, "timed_out": False},
        {"rank": 1, "error": {"type": "ValueError", "message": "rank one stops here"}, "timed_out": False},
    ]
    got = feedback.ranks(runs)
    assert got.message.startswith("train on rank 1 raised ValueError: rank one stops here.")
    assert "Rank 0 then failed in a collective, because the rank above stopped." in got.message
    assert feedback.internals(got.message) == [] and "GLHF" in got.details
    alone = feedback.ranks([runs[0], {"rank": 1, "error": None, "timed_out": True}], timeout_s=40)
    assert alone.message.startswith("On rank 0, a collective"), alone.message
    assert "Rank 1 did not finish within 40 s" in alone.message
    same = {"type": "AttributeError", "message": "'Linear' object has no attribute 'module'"}
    both = feedback.ranks([{"rank": r, "error": same, "timed_out": False} for r in (0, 1)])
    assert both.message.startswith("train on every rank failed: your code read .module of a Linear object")
    assert both.message.count(".module of a Linear") == 1 and both.details.count("rank 1: AttributeError") == 1
    three = [{"rank": r, "error": same if r != 1 else None, "timed_out": False} for r in (0, 1, 2)]
    assert feedback.ranks(three).message.startswith("train on ranks 0 and 2 failed: ")
    hang = feedback.ranks([{"rank": 0, "error": None, "timed_out": True}], timeout_s=40)
    assert "another rank never joined" in hang.message


@pytest.mark.parametrize(
    "message",
    [
        "assert False",
        "assert not [0, 2]",
        "assert 101 <= 51",
        "assert (None == 'b')",
        "rank 0 raised RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
        "[127.0.0.1]:55533. GLHF!",
        "TypeError: Invariant encountered: value was None when it should not be",
        "got b'\\x00\\x00\\x80?'",
        "expected m1 and m2 to have the same dtype, but got: float != c10::BFloat16",
        "Mixing different tf.distribute.Strategy objects: <tensorflow.python.X object at 0x7fb2972eae50>",
        "TypeError: 'NoneType' object is not subscriptable",
        '  File "/usr/lib/python3/site-packages/torch/nn/modules/module.py", line 1, in f',
        "\x1b[1mInput 0\x1b[0m",
        "",
    ],
)
def test_internals_are_found(message: str) -> None:
    assert feedback.internals(message), message


@pytest.mark.parametrize(
    "message",
    [
        "rank 0 made 3.67 collective calls per optimizer step; with accumulation it should make 1.",
        "Your code raised ValueError: n_devices must be positive (your code, line 4).",
        "split_batch([1, 2, 3], 2) returned [[1, 2], [3]]; expected [[1, 2], [3]] as separate lists.",
        "the final weights are 0.031 away from the reference (tolerance 1e-5): where the ranks differ, see below.",
    ],
)
def test_clean_messages_pass(message: str) -> None:
    assert feedback.internals(message) == []


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_recordings_match_the_installed_frameworks() -> None:
    for case in ("torch.dtype_matmul", "torch.scaler_unscale_twice", "torch.peer_left", "tf.mixed_strategies"):
        again = record.record(case)
        if case == "torch.peer_left":  # the peer's port differs from run to run, and gloo says closed or reset
            assert again["type"] == RECORDED[case]["type"]
            now, then = (feedback.explain(r["type"], r["message"]) for r in (again, RECORDED[case]))
            assert (now.cause, now.message) == (then.cause, then.message)
            assert re.search(r"Connection (closed|reset) by peer", again["message"]), again["message"]
        elif case == "tf.mixed_strategies":  # so do the objects' addresses
            assert again["message"].split(":")[0] == RECORDED[case]["message"].split(":")[0]
        else:
            assert again == RECORDED[case], case
