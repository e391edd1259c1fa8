"""What a learner reads when a test fails: one place for the words, the framework's own kept as details.

Contract:
- ``explain(type_name, message)`` turns an exception raised in the learner's code (as its type's name and its
  text) into an ``Explained``: ``message``, a sentence about what the learner's code did, and ``details``, the
  framework's own text (cleaned of terminal codes), shown behind a "details" disclosure. An exception of a known
  failure class (``CLASSES``: a collective another rank left, a device or dtype mix, DDP, FSDP, GradScaler,
  autograd and Keras mistakes, recorded from real torch 2.13 and TensorFlow 2.21 failures in
  ``tests/runner/failures/``) gets that class's sentence; any other gets ``Your code raised Type: first line``.
  A sentence names a cause only where the framework's text proves it, and says "one of" where several causes
  give the same text. TensorFlow's graph wrappers and autograph's renamed functions never reach a sentence
  (``framework_text``; exercises whose tests word TensorFlow's text themselves use it too).
- ``raised(what, type_name, message)`` is the same for a test that reports where the exception happened
  ("train(0, 2) raised ..."); ``ranks(runs)`` explains a multi-rank run whose ranks failed, naming the rank whose
  failure came first (the others only stopped because it did).
- ``fail(message, details=...)`` fails the current test with a message and the raw text behind it (the judge
  puts both into ``result.json``).
- ``internals(message)`` lists what a learner should never read in a message (pytest's assertion
  introspection, a traceback, a library's file path or C++ type, raw bytes, an object's address, gloo's
  farewell, terminal codes); ``gpulab exercises check`` refuses every variant whose messages show any.

Stdlib only: it runs in the judge, inside the sandbox, and in the subject (the import error's sentence).
By hand, not a library: the classes are sentences of ours about texts the frameworks print.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

import pytest

MAX_DETAILS = 4000
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")


@dataclass(frozen=True)
class Explained:
    """A failure told to a learner: the sentence they read, the framework's text kept behind it, the class."""

    message: str
    details: str = ""
    cause: str = ""  # the CLASSES id that matched ("" when none did)


class Failed(pytest.fail.Exception):  # type: ignore[name-defined]
    """``pytest.fail`` with the framework's own text kept as details (``fail()``)."""

    def __init__(self, message: str, details: str = "") -> None:
        super().__init__(msg=message, pytrace=False)
        self.details = details


def fail(message: str | Explained, *, details: str = "") -> NoReturn:
    """Fail the running test with ``message``; ``details`` (or the Explained's) goes behind a disclosure."""
    if isinstance(message, Explained):
        details = details or message.details
        message = message.message
    raise Failed(message, clean_details(details))


_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line \d+')


def _user_code_only(text: str) -> str:
    """Keep of a tf.function's "in user code:" report its frames in the learner's own file and its error lines.

    TensorFlow lists every frame between the learner's call and the error: the grader's probes, Keras and
    TensorFlow files, none of them the learner's to read or fix.
    """
    lines = text.splitlines()
    kept: list[str] = []
    skipping = False
    for line in lines:
        frame = _FRAME.match(line)
        if frame:
            skipping = "/submission/" not in frame["path"]
            if not skipping:
                kept.append(line)
            continue
        if skipping and line.startswith((" " * 8, "\t")):  # the frame's source line
            continue
        skipping = False
        kept.append(line)
    return "\n".join(kept)


def clean_details(text: str) -> str:
    """Return ``text`` without terminal codes or the grader's and libraries' frames of a tf.function's report,
    capped for the result file."""
    text = _ANSI.sub("", text).strip()
    if "in user code:" in text:
        text = _user_code_only(text)
    return text if len(text) <= MAX_DETAILS else text[: MAX_DETAILS - 14].rstrip() + "\n... (trimmed)"


# TensorFlow wraps an op's error in its graph's names ({{function_node __inference_...}}, for '{{node ...}}',
# [Op:Name] name: ..., a goo.gle link) and autograph renames a learner's function (outer_factory.<locals>...tf__step):
# none of it is the learner's, so it never reaches the sentence (it stays in the details).
_TF_WRAPPERS = (
    (re.compile(r"\{\{function_node [^}]*\}\}\s*"), ""),
    (re.compile(r" for '\{\{node [^']*'"), ""),
    (re.compile(r"\s*\[Op:\w+\](?:\s*name:\s*\S*)?"), ""),
    (re.compile(r"\s*(?:For more information, see |See )?(?:https?://)?goo\.gle/\S*"), ""),
    (re.compile(r"\b(?:\w+\.<locals>\.)+tf__|\btf__(?=\w+\()"), ""),
)


def framework_text(text: str) -> str:
    """Return ``text`` without TensorFlow's graph wrappers and autograph's renaming (``_TF_WRAPPERS``)."""
    for pattern, replacement in _TF_WRAPPERS:
        text = pattern.sub(replacement, text)
    return text


def first_line(text: str) -> str:
    """Return the first non-empty line of ``text`` without terminal codes (Keras puts its point on line 3) or
    TensorFlow's graph wrappers."""
    for line in framework_text(_ANSI.sub("", text)).splitlines():
        line = line.strip()
        if line and not line.startswith("Exception encountered when calling"):
            return line
    return ""


@dataclass(frozen=True)
class FailureClass:
    """A known way learner code fails inside a framework: the text that shows it, and what to tell them.

    ``sentence`` is a format string over the pattern's named groups; ``fill`` may compute more fields.
    """

    id: str
    pattern: re.Pattern[str]
    sentence: str
    types: tuple[str, ...] = ()  # exception type names it applies to (any when empty)
    fill: Callable[[re.Match[str]], dict[str, str]] | None = None

    def match(self, type_name: str, message: str) -> re.Match[str] | None:
        if self.types and type_name not in self.types:
            return None
        return self.pattern.search(message)

    def render(self, found: re.Match[str]) -> str:
        values = {k: v or "" for k, v in found.groupdict().items()}
        if self.fill is not None:
            values.update(self.fill(found))
        return self.sentence.format(**values)


_DTYPE_NAMES = {"float": "float32", "double": "float64", "half": "float16", "bfloat16": "bfloat16", "long": "int64"}


def _dtype(name: str) -> str:
    name = name.strip().removeprefix("c10::").removeprefix("torch.")
    return _DTYPE_NAMES.get(name.lower(), name)


def _dtypes(found: re.Match[str]) -> dict[str, str]:
    return {"a": _dtype(found["a"]), "b": _dtype(found["b"])}


def _keys(found: re.Match[str]) -> dict[str, str]:
    return {"missing": found["missing"].strip().rstrip(".") or "none", "unexpected": found["unexpected"].strip()}


_COLLECTIVE_RULE = "every rank must run the same collectives, in the same order, the same number of times"

CLASSES: tuple[FailureClass, ...] = (
    FailureClass(
        "collective.peer_gone",
        re.compile(r"Connection closed by peer|Connection reset by peer|Broken pipe|ECONNRESET|ncclRemoteError"),
        "a collective (an all-reduce, a broadcast, or DDP's gradient sync) failed because another rank stopped "
        f"taking part: it had crashed, returned or left before reaching the same collective ({_COLLECTIVE_RULE})",
    ),
    FailureClass(
        "collective.timeout",
        re.compile(r"(?i)gloo.*timed? ?out|timed out waiting|Socket Timeout|Watchdog caught collective operation"),
        "a collective waited for another rank that never joined it: one rank entered an all-reduce, broadcast or "
        f"DDP gradient sync the other did not reach ({_COLLECTIVE_RULE})",
    ),
    FailureClass(
        "process_group.missing",
        re.compile(r"Default process group has not been initialized"),
        "something distributed (a collective, DistributedDataParallel, DistributedSampler or dist.get_rank) ran "
        "while no process group existed: before dist.init_process_group(...), or after "
        "dist.destroy_process_group(). Initialise the process group first, on every rank, and destroy it only "
        "after the last collective",
    ),
    FailureClass(
        "allgather.unequal_sizes",
        re.compile(r"ProcessGroupGloo::allgather: invalid tensor size"),
        "your code gave dist.all_gather tensors of different sizes: on gloo, the tensor a rank sends and every "
        "tensor of the output list must have one shape, on every rank. To gather shards of unequal length, pad each "
        "rank's tensor to one length (and gather the true lengths too), all-reduce counts instead, or use "
        "dist.all_gather_object",
        types=("RuntimeError", "ValueError"),
    ),
    FailureClass(
        "process_group.twice",
        re.compile(r"initialize the default process group twice"),
        "your code called dist.init_process_group a second time in the same process: call it once per rank, and "
        "dist.destroy_process_group() once at the end",
    ),
    FailureClass(
        "process_group.destroyed_twice",
        re.compile(r"Process group cannot be None"),
        "your code destroyed a process group that no longer existed: dist.destroy_process_group() ran after the "
        "group had already been destroyed (a second call, for example one inside a loop) or before it was "
        "initialised. Call it once per rank, at the end, after the last collective",
        types=("AssertionError",),
    ),
    FailureClass(
        "process_group.no_nccl",
        re.compile(r"Distributed package doesn't have NCCL built in|ProcessGroupNCCL is only supported with GPUs"),
        'a process group was asked for the "nccl" backend, which runs only on CUDA GPUs and is not available in '
        'this run: choose "nccl" only when torch.cuda.is_available() is True, and "gloo" otherwise',
    ),
    FailureClass(
        "ddp.no_parameters",
        re.compile(r"DistributedDataParallel is not needed when a module doesn't have any parameter"),
        "DistributedDataParallel was given a module without trainable parameters: wrap the model that holds the "
        "layers you train",
    ),
    FailureClass(
        "ddp.device_ids_on_cpu",
        re.compile(r"device_ids and output_device arguments only work with .*?got device_ids (?P<ids>\[[^\]]*\])"),
        "DistributedDataParallel was given device_ids={ids} for a model on the CPU: device_ids names GPUs; for "
        "CPU ranks leave it out (DistributedDataParallel(model))",
    ),
    FailureClass(
        "ddp.hook_not_future",
        re.compile(r"hook's callback must return a torch\.futures\.Future object, but got (?P<got>[\w.]+)"),
        "your DDP communication hook returned a {got}, not a torch.futures.Future: DDP waits on the future a hook "
        "returns. Start the all-reduce with async_op=True and return its future "
        "(dist.all_reduce(t, async_op=True).get_future(), or the future its .then(...) returns)",
    ),
    FailureClass(
        "ddp.unused_parameters",
        re.compile(r"Expected to have finished reduction in the prior iteration"),
        "DDP started a new step while the last one still waited for gradients: in the previous backward some "
        "parameters got no gradient (a layer the forward did not use, or an output left out of the loss). Use "
        "every parameter in the loss, or pass find_unused_parameters=True",
    ),
    FailureClass(
        "ddp.marked_twice",
        re.compile(r"Expected to mark a variable ready only once"),
        "DDP saw one parameter's gradient become ready twice in one backward: the same parameters were used in "
        "two forward passes (or a reentrant checkpoint) before one backward",
    ),
    FailureClass(
        "ddp.no_sync_elsewhere",
        re.compile(r"'(?P<owner>\w+)' object has no attribute 'no_sync'"),
        "your code looked for no_sync() on a {owner} object, which does not have it: no_sync() belongs to the "
        "DistributedDataParallel wrapper (what DistributedDataParallel(...) returned), not to the model inside it "
        "(model.module) or a model that was never wrapped",
        types=("AttributeError",),
    ),
    FailureClass(
        "wrapper.module_elsewhere",
        re.compile(r"'(?P<owner>\w+)' object has no attribute 'module'"),
        "your code read .module of a {owner} object, which has none: .module is what a wrapper "
        "(DistributedDataParallel or DataParallel) holds, the model it wraps; a model that was never wrapped is "
        "already the model itself",
        types=("AttributeError",),
    ),
    FailureClass(
        "state_dict.module_prefix",
        re.compile(r'Unexpected key\(s\) in state_dict: "module\.'),
        'load_state_dict was given keys that start with "module.": that is the state_dict of a '
        "DistributedDataParallel or DataParallel wrapper. Save or return model.module.state_dict(), the wrapped "
        "model's own",
    ),
    FailureClass(
        "state_dict.keys",
        re.compile(
            r"Error\(s\) in loading state_dict for \w+:\s*(?:Missing key\(s\) in state_dict: (?P<missing>[^\n]*))?"
            r"\s*(?:Unexpected key\(s\) in state_dict: (?P<unexpected>[^\n]*))?"
        ),
        "load_state_dict was given a state_dict whose keys do not match the model's (missing: {missing}; "
        "unexpected: {unexpected})",
        fill=_keys,
    ),
    FailureClass(
        "torch_load.weights_only",
        re.compile(r"Weights only load failed(?:[\s\S]*?Unsupported global: GLOBAL (?P<name>[\w.]+))?"),
        "torch.load refused the file: it loads with weights_only=True (the default since torch 2.6), which reads only "
        "tensors, state_dicts and plain Python values (numbers, strings, lists, dicts), and {what}. Save only such "
        "values in a checkpoint (a state_dict, the epoch as a number), or load a file your own code wrote with "
        "torch.load(path, weights_only=False)",
        types=("UnpicklingError",),
        fill=lambda m: {
            "what": f"the file holds an object of type {m['name']}"
            if m["name"]
            else "the file holds something else (an object of another type, or data torch.save did not write)"
        },
    ),
    FailureClass(
        "torch_load.cuda_without_gpu",
        re.compile(r"Attempting to deserialize object on a CUDA device but torch\.cuda\.is_available\(\) is False"),
        "torch.load was to put the file's tensors on a CUDA device, and this run has no GPU: map_location names a "
        "CUDA device, or the file was saved from CUDA tensors and is loaded without map_location. Load it with "
        'map_location="cpu" (or the device this process trains on)',
    ),
    FailureClass(
        "state_dict.not_a_mapping",
        re.compile(r"Expected state_dict to be dict-like, got <class '(?:[\w.]*\.)?(?P<got>\w+)'>"),
        "load_state_dict was given a {got} object, not a state dict: it takes a mapping of names to tensors, such "
        "as what module.state_dict() returns",
        types=("TypeError",),
    ),
    FailureClass(
        "device.mismatch",
        re.compile(
            r"Expected all tensors to be on the same device(?:, but found at least two devices, (?P<a>[\w:]+) "
            r"and (?P<b>[\w:]+))?"
        ),
        "one operation got tensors on two devices ({a} and {b}): a layer computes only on tensors on its own "
        "device, so move its input (the batch, an activation or the targets) there first",
        fill=lambda m: {"a": m["a"] or "two", "b": m["b"] or "another"},
    ),
    FailureClass(
        "device.no_cuda",
        re.compile(
            r"Torch not compiled with CUDA enabled|No CUDA GPUs are available|Found no NVIDIA driver|"
            r"CUDA error: invalid device ordinal|Invalid device id|"
            r"module 'torch\._C' has no attribute '_cuda_\w+'"  # a CPU build's torch.cuda.set_device & co
        ),
        "your code asked for a CUDA device this run does not have: use only the devices the prompt names",
    ),
    FailureClass(
        "dtype.mismatch",
        re.compile(
            r"(?:mat1 and mat2 must have the same dtype, but got (?P<a>\w+) and (?P<b>\w+)"
            r"|expected m1 and m2 to have the same dtype, but got: (?P<a2>[\w:]+) != (?P<b2>[\w:]+)"
            r"|Input type \((?P<a3>[\w.]+)\) and weight type \((?P<b3>[\w.]+)\) should be the same)"
        ),
        "one operation mixed two dtypes ({a} and {b}): a layer's weights and its input must have one dtype. Cast "
        "the input (x.float()), or run the forward under autocast, which casts for you",
        fill=lambda m: {
            "a": _dtype(m["a"] or m["a2"] or m["a3"] or "?"),
            "b": _dtype(m["b"] or m["b2"] or m["b3"] or "?"),
        },
    ),
    FailureClass(
        "loss.target_dtype",
        re.compile(
            r"expected target dtype to be Long or Byte, but got (?P<b>\w+)|"
            r"expected scalar type Long but found (?P<b2>\w+)"
        ),
        "the loss got class labels of dtype {b}: cross_entropy takes class indices as integers (torch.long); "
        "keep the labels as the dataset gives them, or call .long()",
        fill=lambda m: {"b": _dtype(m["b"] or m["b2"] or "?")},
    ),
    FailureClass(
        "loss.batch_mismatch",
        re.compile(r"Expected input batch_size \((?P<a>\d+)\) to match target batch_size \((?P<b>\d+)\)"),
        "the loss got {a} predictions but {b} targets. One of: the predictions and the targets came from "
        "different rows (another batch or shard), or the model's output has another shape than the loss expects "
        "(outputs joined or flattened along the wrong dimension)",
    ),
    FailureClass(
        "shape.matmul",
        re.compile(r"mat1 and mat2 shapes cannot be multiplied \((?P<a>\d+)x(?P<b>\d+) and (?P<c>\d+)x(?P<d>\d+)\)"),
        "a matrix product (a Linear layer or @) got shapes that do not fit, {a}x{b} and {c}x{d}: the input's last "
        "dimension ({b}) must equal the layer's in_features ({c})",
    ),
    FailureClass(
        "shape.broadcast",
        re.compile(
            r"The size of tensor a \((?P<a>\d+)\) must match the size of tensor b \((?P<b>\d+)\) at non-singleton "
            r"dimension (?P<dim>\d+)"
        ),
        "two tensors whose shapes do not fit together met in one element-wise operation (arithmetic such as + or *, "
        "an in-place copy_ or add_, or a loss): at dimension {dim} one has {a} entries and the other {b}, and "
        "broadcasting stretches only a dimension of size 1. Give both the same shape first (for example with "
        ".view_as(other) or .reshape(...))",
    ),
    FailureClass(
        "autograd.no_graph",
        re.compile(r"element \d+ of tensors does not require grad and does not have a grad_fn"),
        "your code called backward() on a value without gradient history: it was computed under torch.no_grad(), from "
        "detached values (.detach(), .item(), .numpy(), a new tensor), or from parameters that do not require "
        "gradients",
    ),
    FailureClass(
        "autograd.backward_twice",
        re.compile(r"Trying to backward through the graph a second time"),
        "your code ran backward() twice through the same graph: compute a fresh forward pass and loss for every "
        "backward",
    ),
    FailureClass(
        "python.context_manager_reused",
        re.compile(r"'_GeneratorContextManager' object has no attribute 'args'"),
        "your code entered one context manager object a second time: an object made by a @contextlib.contextmanager "
        "function (model.no_sync() makes one) serves a single `with`. Call the function again for every `with` "
        "(`with model.no_sync():` inside the loop, not one `ctx = model.no_sync()` entered again and again)",
        types=("AttributeError",),
    ),
    FailureClass(
        "autograd.inplace",
        re.compile(r"modified by an inplace operation"),
        "a tensor that backward needs was changed in place after it was used (an operation ending in _, such "
        "as add_ or mul_, or an assignment into it): use the out-of-place form (x = x * 2)",
    ),
    FailureClass(
        "scaler.unscale_twice",
        re.compile(r"unscale_\(\) has already been called on this optimizer since the last update\(\)"),
        "your code called scaler.unscale_(optimizer) twice in one step: unscale once, then "
        "scaler.step(optimizer) and scaler.update()",
    ),
    FailureClass(
        "scaler.not_scaled",
        re.compile(r"Attempted step but _scale is None"),
        "your code called scaler.step(optimizer) before any loss went through scaler.scale(...): call "
        "scaler.scale(loss).backward() first",
    ),
    FailureClass(
        "scaler.no_inf_checks",
        re.compile(r"No inf checks were recorded for this optimizer"),
        "GradScaler's step(optimizer) found no gradients to check: none of that optimizer's parameters got a gradient "
        "from scaler.scale(loss).backward() in this step",
    ),
    FailureClass(
        "scaler.fp16_parameters",
        re.compile(r"Attempting to unscale FP16 gradients"),
        "GradScaler found float16 gradients, so the parameters themselves are float16 (.half() or "
        ".to(torch.float16)): keep the model in float32 and let autocast run the low-precision operations",
    ),
    FailureClass(
        "scaler.update_without_step",
        re.compile(r"No inf checks were recorded prior to update"),
        "scaler.update() ran with no scaler.step(optimizer) since the scaler's previous update: the step was "
        "optimizer.step() called directly, or update() came before scaler.step(optimizer) or twice in one step. "
        "Step through scaler.step(optimizer), which unscales the gradients and checks them for inf and NaN, then "
        "call scaler.update() once",
        types=("AssertionError",),
    ),
    FailureClass(
        "scaler.step_without_update",
        re.compile(
            r"unscale_\(\) is being called after step\(\)|step\(\) has already been called since the last update\(\)"
        ),
        "your code called scaler.unscale_(optimizer) or scaler.step(optimizer) after scaler.step(optimizer) with no "
        "scaler.update() in between: every step ends with scaler.update()",
        types=("RuntimeError",),
    ),
    FailureClass(
        "autocast.no_device_type",
        re.compile(r"autocast\.__init__\(\) missing 1 required positional argument: 'device_type'"),
        'torch.autocast was called without its device type: name it first, as in torch.autocast("cpu", '
        'dtype=torch.bfloat16) ("cuda" for GPU tensors)',
        types=("TypeError",),
    ),
    FailureClass(
        "dist.not_a_tensor",
        re.compile(
            r"Invalid function argument\. Expected parameter `(?P<param>\w+)` of type "
            r"(?P<want>torch\.Tensor|List\[torch\.Tensor\])\s+but got <class '(?P<got>[\w.]+)'>"
        ),
        "a torch.distributed collective was given a {got} as its `{param}`, where it takes {want}: collectives read "
        "and write tensors in place. Put the values in a tensor (for example t = torch.tensor([a, b])), pass that, "
        "and read the result from the same tensor afterwards",
        types=("TypeError",),
        fill=lambda m: {"want": "a tensor" if m["want"] == "torch.Tensor" else "a list of tensors"},
    ),
    FailureClass(
        "python.none_not_iterable",
        re.compile(r"'NoneType' object is not iterable|cannot unpack non-iterable NoneType object"),
        "your code iterated over None (a for loop, an unpacking, sum() or list() of a value that is None). A common "
        "cause is keeping what a function that works in place returns: dist.all_reduce, dist.all_gather and "
        "dist.all_gather_object fill the tensor or list you pass them and return None, so read the results from that "
        "tensor or list; a function of your own that ends without `return` gives None too",
        types=("TypeError",),
    ),
    FailureClass(
        "tensor.item_of_many",
        re.compile(r"a Tensor with (?P<n>\d+) elements cannot be converted to Scalar"),
        "your code called .item() (or float()) on a tensor of {n} values: reduce it first (loss.mean(), .sum()) "
        "or take one element",
    ),
    FailureClass(
        "tensor.numpy_requires_grad",
        re.compile(r"Can't call numpy\(\) on Tensor that requires grad"),
        "your code called .numpy() on a tensor that requires gradients: call .detach() first (t.detach().numpy())",
    ),
    FailureClass(
        "python.with_uncalled_method",
        re.compile(r"'method' object does not support the (?:asynchronous )?context manager protocol"),
        "a `with` statement was given a method itself instead of what calling it returns: add the parentheses "
        "(for example `with model.no_sync():`, not `with model.no_sync:`)",
        types=("TypeError",),
    ),
    FailureClass(
        "dataloader.sampler_and_shuffle",
        re.compile(r"(?<!batch_)sampler option is mutually exclusive with shuffle"),
        "a DataLoader was given both a sampler and shuffle=True: the sampler alone decides the order (a "
        "DistributedSampler shuffles by itself, with its own shuffle= and set_epoch), so leave shuffle out of the "
        "DataLoader",
        types=("ValueError",),
    ),
    FailureClass(
        "optimizer.no_parameters",
        re.compile(r"optimizer got an empty parameter list"),
        "an optimizer was made with no parameters. One of: it was not given model.parameters() of the model you "
        "train; a parameters() generator that was already used up (it is empty the second time); a model that "
        "registers no parameters (layers kept in a plain Python list or dict are not registered: use "
        "nn.ModuleList or nn.ModuleDict)",
    ),
    FailureClass(
        "fsdp.child_after_parent",
        re.compile(r"Invariant encountered: value was None"),
        "FSDP's own bookkeeping failed. The known cause: fully_shard was applied to a submodule after its parent "
        "(shard the children first and the root module last)",
        types=("TypeError",),
    ),
    FailureClass(
        "tf.physical_device_name",
        re.compile(r"Unknown attribute 'physical_device' is encountered while parsing the device spec"),
        "a strategy was given a physical device's name (/physical_device:...): strategies take logical device "
        "names, such as those tf.config.list_logical_devices() lists (/device:CPU:0)",
    ),
    FailureClass(
        "tf.python_number_of_graph_tensor",
        re.compile(r"(?P<call>int|float)\(\) argument must be .* not 'SymbolicTensor'"),
        "{call}() was called on a tensor inside a tf.function (or a Keras step): while TensorFlow traces the "
        "function into a graph a tensor has no value yet, so Python cannot make a number of it. Keep the "
        "computation in TensorFlow operations (tf.cast, tf.minimum, tf.where, ...) and print with tf.print",
        types=("TypeError",),
    ),
    FailureClass(
        "tf.numpy_of_graph_tensor",
        re.compile(r"'SymbolicTensor' object has no attribute 'numpy'"),
        "code inside a tf.function (or a Keras step) asked a tensor for its value (.numpy(), or int() or float() "
        "of a tf.Variable): while TensorFlow traces the function into a graph a tensor has no value yet. Keep the "
        "computation in TensorFlow operations (tf.cast, tf.minimum, tf.where, ...) and print with tf.print",
        types=("AttributeError",),
    ),
    FailureClass(
        "keras.mixed_strategies",
        re.compile(r"Mixing different tf\.distribute\.Strategy objects"),
        "two different tf.distribute strategies were mixed: something made under one strategy (a model, a "
        "variable, a scope) was used under another. Make one strategy and build, compile and train under its "
        "scope",
    ),
    FailureClass(
        "tf.outside_strategy_scope",
        re.compile(r'Need to be inside "with strategy\.scope\(\)" for'),
        "code that needs a strategy's scope ran outside every `with strategy.scope():`: TensorFlow says so when "
        "variables are created for a model built under a strategy, or placed next to its variables (an optimizer's "
        "variables, made by optimizer.build(...) or by a restore, are the usual case). Run that code inside "
        "`with strategy.scope():` of the strategy the model was built under",
        types=("RuntimeError",),
    ),
    FailureClass(
        "tf.sync_in_nested_graph",
        re.compile(r"`merge_call` called while defining a new graph or a tf\.function"),
        "a step that synchronises the replicas (optimizer.apply_gradients, which sums their gradients, an all-reduce, "
        "or a merge_call) ran inside a nested graph: under an `if` or a loop on a tensor, which tf.function turns "
        "into graph control flow (an `if` on the replica id, say), or inside a @tf.function nested in the function "
        "given to strategy.run. Every replica must reach it: call it unconditionally, at the top level of the replica "
        "function, and put @tf.function around strategy.run, not inside the function it runs",
        types=("RuntimeError",),
    ),
    FailureClass(
        "tf.average_loss_scalar",
        re.compile(r"Invalid value passed for `per_example_loss`\. Expected a tensor with at least rank 1"),
        "tf.nn.compute_average_loss was given a single number (rank 0), not one loss per example: it sums the "
        "per-example losses and divides by the global batch size. A single number usually means the losses were "
        "already reduced: a Keras loss object (keras.losses.SparseCategoricalCrossentropy(...), say) averages them "
        "unless it is made with reduction=None, and tf.reduce_mean or tf.reduce_sum leave one number too. Pass the "
        "unreduced losses, such as keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)",
        types=("ValueError",),
    ),
    FailureClass(
        "keras.per_replica_input",
        re.compile(r"should be passed as a keyword argument: PerReplica"),
        "a Keras model or layer was called on a per-replica value (a PerReplica: a batch taken from a distributed "
        "dataset, or what strategy.run returned). Such a value holds one part per replica, and only strategy.run "
        "unpacks it, handing each replica its own part: call the model inside the function you pass to strategy.run, "
        "on the batch it receives through args, or call it on plain tensors",
        types=("ValueError",),
    ),
    FailureClass(
        "keras.not_compiled",
        re.compile(r"You must call `compile\(\)` before using the model"),
        "the model was used for training or evaluation before model.compile(...): compile it first",
    ),
    FailureClass(
        "keras.input_shape",
        re.compile(
            r"expected axis (?P<axis>-?\d+) of input shape to have value (?P<want>\d+), but received input "
            r"with shape (?P<got>\([^)]*\))"
        ),
        "a layer got input of the wrong shape: it expects {want} values on axis {axis}, and got shape {got}",
    ),
    FailureClass(
        "tf.reduce_op",
        re.compile(r"'(?P<op>[^']*)' is not a valid ReduceOp"),
        "the reduce operation '{op}' does not exist: use tf.distribute.ReduceOp.SUM or tf.distribute.ReduceOp.MEAN",
    ),
    FailureClass(
        "tf.shard_count",
        re.compile(r"Number of shards must be greater than zero \(currently num_shards = (?P<n>-?\d+)\)"),
        "Dataset.shard(num_shards, index) was called with num_shards = {n}: its first argument is how many shards "
        "there are (at least 1), its second which one this is, from 0. Check the order of the two arguments and "
        "what the count is computed from (for a tf.distribute input pipeline: "
        "dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id))",
        types=("InvalidArgumentError",),
    ),
    FailureClass(
        "tf.shard_index",
        re.compile(
            r"Index must be between 0 and (?P<last>-?\d+) \(currently index = (?P<index>-?\d+)\)(?=[\s\S]*ShardDataset)"
        ),
        "Dataset.shard(num_shards, index) was called with index = {index}, where that num_shards allows 0 to {last}: "
        "its first argument is how many shards there are, its second which one this is, from 0. Check the order of "
        "the two arguments (for a tf.distribute input pipeline: "
        "dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id))",
        types=("InvalidArgumentError",),
    ),
    FailureClass(
        "tf.non_rectangular_list",
        re.compile(r"Can't convert non-rectangular Python sequence to Tensor"),
        "TensorFlow was given a Python list whose items have different shapes where it needed one tensor: a list is "
        "stacked into a single tensor, so its items must all have one shape. To pass features and labels together "
        "(to Dataset.from_tensor_slices, say), use a tuple (x, y), not a list [x, y]",
        types=("ValueError",),
    ),
    FailureClass(
        "tf.batch_size_not_positive",
        re.compile(r"Batch size must be greater than zero"),
        "a tf.data dataset was batched with a batch size of 0 or less (Dataset.batch or padded_batch): a batch holds "
        "at least one example. Check how your code computes the batch size it passes",
        types=("InvalidArgumentError",),
    ),
    FailureClass(
        "keras.save_extension",
        re.compile(r"Invalid filepath extension for saving"),
        "model.save (or keras.saving.save_model) was given a path that ends neither in .keras nor in .h5: Keras saves "
        'a whole model into one file named with one of those extensions (os.path.join(folder, "model.keras"), for '
        "example), not into a folder; model.export(path) writes a SavedModel folder instead",
        types=("ValueError",),
    ),
    FailureClass(
        "submission.missing_name",
        re.compile(r"module '(?:submission|__main__)' has no attribute '(?P<name>\w+)'"),
        "your code has no `{name}`: the tests call it by that name. Define it at the top level of your file, "
        "spelled as the prompt says",
        types=("AttributeError",),
    ),
    FailureClass(
        "import.missing_module",
        re.compile(r"No module named '(?P<module>[^']+)'"),
        "your code imports {module}, which the grader does not have: use only the standard library and the "
        "framework the exercise is about",
        types=("ModuleNotFoundError", "ImportError"),
    ),
)


def classify(type_name: str, message: str) -> tuple[FailureClass, re.Match[str]] | None:
    """Return the known failure class of this exception, with its match, or None."""
    for known in CLASSES:
        found = known.match(type_name, message)
        if found is not None:
            return known, found
    return None


def _sentence(text: str, *, capital: bool = True) -> str:
    """End ``text`` with a full stop; capitalise it unless it starts with code (``what`` in ``raised``)."""
    text = text.strip()
    head = text[:1].upper() if capital else text[:1]
    return head + text[1:] + ("" if text.endswith((".", "!", "?")) else ".")


def explain(type_name: str, message: str) -> Explained:
    """Explain an exception raised in the learner's code (its type's name and its text)."""
    details = clean_details(f"{type_name}: {message}" if message else type_name)
    known = classify(type_name, message)
    if known is not None:
        failure, found = known
        return Explained(_sentence(failure.render(found)), details, failure.id)
    line = first_line(message)
    said = f"Your code raised {type_name}: {line}" if line else f"Your code raised {type_name} (with no message)"
    # The first line is all a learner needs of their own exception; a longer text stays in the details.
    return Explained(_sentence(said), details if line != message.strip() else "")


def _lower_first(text: str) -> str:
    """``text`` to follow a colon: its first letter lowered, unless the first word is a name (DistributedDataParallel,
    DDP's, GradScaler: another capital in it)."""
    word = text.split(" ", 1)[0]
    return text if any(c.isupper() for c in word[1:]) else text[:1].lower() + text[1:]


def raised(what: str, type_name: str, message: str) -> Explained:
    """Explain an exception that ``what`` ("train(0, 2)", "your model's fit") raised: ``what raised ...``."""
    got = explain(type_name, message)
    if got.cause:
        return Explained(f"{what} failed: {_lower_first(got.message)}", got.details, got.cause)
    line = first_line(message)
    said = f"{what} raised {type_name}: {line}" if line else f"{what} raised {type_name} (with no message)"
    return Explained(_sentence(said, capital=False), got.details, "")


def _error_of(run: Mapping[str, Any]) -> tuple[str, str] | None:
    error = run.get("error")
    if isinstance(error, Mapping):
        return str(error.get("type", "Exception")), str(error.get("message", ""))
    return None


def _ranks_named(numbers: list[Any], of: int) -> str:
    """``rank 0``, ``ranks 0 and 2``, ``every rank`` (all ``of`` ranks, more than one)."""
    if len(numbers) == 1:
        return f"rank {numbers[0]}"
    if len(numbers) == of:
        return "every rank"
    return "ranks " + ", ".join(str(n) for n in numbers[:-1]) + f" and {numbers[-1]}"


def ranks(runs: Iterable[Mapping[str, Any]], *, what: str = "train", timeout_s: float | None = None) -> Explained:
    """Explain why some ranks of a multi-rank run did not finish (``runner.vdev.ddp``'s plain results).

    The rank whose own failure started it is named first: a rank that raised something other than a broken
    collective, else one that exited without a result; ranks that failed in a collective because of it, and
    ranks left waiting, are told as consequences. Ranks that raised the same error are told it once ("train on
    every rank failed: ...").
    """
    runs = list(runs)
    own: list[tuple[Mapping[str, Any], tuple[str, str]]] = []
    followers: list[tuple[Mapping[str, Any], tuple[str, str]]] = []
    waited: list[Mapping[str, Any]] = []
    died: list[Mapping[str, Any]] = []
    for r in runs:
        error = _error_of(r)
        if error is not None:
            known = classify(*error)
            (followers if known and known[0].id.startswith("collective.") else own).append((r, error))
        elif r.get("timed_out"):
            waited.append(r)
        elif r.get("destroyed") is None and r.get("exit_code") is not None:
            died.append(r)
    parts: list[str] = []
    details: list[str] = []
    alike: dict[tuple[str, str], list[Any]] = {}  # ranks that raised the same thing are told it once
    for r, error in own:
        alike.setdefault(error, []).append(r["rank"])
        details.append(f"rank {r['rank']}: {clean_details(f'{error[0]}: {error[1]}')}")
    for (type_name, message), numbers in alike.items():
        parts.append(raised(f"{what} on {_ranks_named(numbers, len(runs))}", type_name, message).message)
    for r in died:
        parts.append(f"Rank {r['rank']} exited without returning a result (exit code {r.get('exit_code')}).")
    first = bool(parts)
    for r, (type_name, message) in followers:
        got = explain(type_name, message)
        if first:
            parts.append(f"Rank {r['rank']} then failed in a collective, because the rank above stopped.")
        else:
            parts.append(f"On rank {r['rank']}, {_lower_first(got.message)}")
        details.append(f"rank {r['rank']}: {clean_details(f'{type_name}: {message}')}")
    for r in waited:
        limit = f" within {timeout_s:g} s" if timeout_s else ""
        if first or followers:
            parts.append(
                f"Rank {r['rank']} did not finish{limit}: it waited in a collective for a rank that had stopped."
            )
        else:
            parts.append(
                f"Rank {r['rank']} did not finish{limit}: it waited in a collective (an all-reduce, broadcast, "
                "all-gather, DDP's gradient sync or FSDP's all-gathers and reduce-scatters) that another rank never "
                f"joined; {_COLLECTIVE_RULE}."
            )
    if not parts:
        parts.append("Every rank finished.")
    return Explained(" ".join(parts), "\n".join(details))


# What a learner must never read: each with a regex that finds it in a message.
INTERNALS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("pytest's assertion introspection", re.compile(r"(?m)^\s*(?:assert |AssertionError\b|\+\s+where |where \w+ = )")),
    ("a traceback", re.compile(r"(?m)Traceback \(most recent call last\)|^\s*File \"[^\"]+\", line \d+")),
    ("a path inside a library", re.compile(r"site-packages/|dist-packages/|/__w/|third_party/|\.(?:cc|cpp|h):\d+")),
    ("a C++ name", re.compile(r"\bc10::|\bat::\w|\bstd::\w")),
    ("gloo's own text", re.compile(r"GLHF|Connection closed by peer|ProcessGroupGloo")),
    ("an internal invariant", re.compile(r"Invariant encountered")),
    ("an object's address", re.compile(r"\bat 0x[0-9a-fA-F]{6,}")),
    ("raw bytes", re.compile(r"\bb'(?:\\x[0-9a-f]{2}){2}|\bb\"(?:\\x[0-9a-f]{2}){2}")),
    ("terminal codes", re.compile(r"\x1b\[|\[1m|\[0m")),
    ("an unchecked None", re.compile(r"'NoneType' object")),
    ("TensorFlow's graph names", re.compile(r"\{\{function_node |\{\{node |\[Op:\w+\]|<locals>\.tf__|\btf__\w+\(")),
    ("a harness name", re.compile(r"\b(?:SubmissionProxy|RemoteFunction|LearnerException|LookupError: )")),
)


def internals(message: str) -> list[str]:
    """Return what in ``message`` a learner should never read (empty when it is clean)."""
    if not message.strip():
        return ["an empty message"]
    return [name for name, pattern in INTERNALS if pattern.search(message)]
