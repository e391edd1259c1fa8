"""Hidden tests for tf-global-batch. They run in the judge (no TensorFlow here, only data).

The probes call the learner's functions with a real 2-replica MirroredStrategy ("mirrored"), a 1-replica
MirroredStrategy ("one") or a stand-in object whose only attribute is num_replicas_in_sync (a number).
The examples are `probes.data(n)`: row i of the features starts with i, so order and loss are visible; every
batch comes back with the shape of its features and of its labels, so a dataset of the wrong structure (the
whole array as one element, labels first) is told apart from a wrong batch size.
"""

import re
from typing import NoReturn

from probes import data
from runner import feedback

FIX = "The global batch is what one step takes across all replicas: per_replica_batch * strategy.num_replicas_in_sync."
FEATURES = 4  # columns of probes.data's features
TWO_CANDIDATES = (
    "Candidates: a hard-coded 2 (do not hard-code 2), or a count of the devices of the machine the code runs on "
    "(this grader has 2 logical devices, so tf.config.list_logical_devices() or a MirroredStrategy() built inside "
    "your function counts 2). Read strategy.num_replicas_in_sync of the strategy passed in."
)
SEVERAL = (
    "Every element of the dataset already held several examples when it was batched. Candidates: the "
    "dataset was made with Dataset.from_tensors((features, labels)), which makes ONE element of the whole "
    "arrays (from_tensor_slices((features, labels)) makes one element per example), or it was batched twice."
)


def _describe(replicas):
    if replicas == "mirrored":
        return "MirroredStrategy() with 2 replicas"
    if replicas == "one":
        return "MirroredStrategy(devices=['/cpu:0']) with 1 replica"
    return f"a strategy with num_replicas_in_sync == {replicas}"


def _count(replicas):
    return 2 if replicas == "mirrored" else 1 if replicas == "one" else int(replicas)


def _replicas(k):
    return f"{k} replica" + ("" if k == 1 else "s")


def _expected_sizes(n, size):
    return [size] * (n // size) + ([n % size] if n % size else [])


def _show(values, limit=15):
    shown = ", ".join(str(v) for v in values[:limit])
    return f"[{shown}{', ...' if len(values) > limit else ''}]"


def _shape(shape):
    if shape is None:
        return "(unknown)"
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _fail_raised(what, exc, hint="") -> NoReturn:
    """Fail with what the learner's code raised (worded by runner.feedback, the raw text as details) and a hint."""
    type_name = getattr(exc, "type_name", type(exc).__name__)
    message = str(exc.args[0]) if exc.args else ""
    message = feedback.framework_text(message)  # TensorFlow's op names are not the learner's
    told = feedback.raised(what, type_name, message)
    line = getattr(exc, "line", None)
    text = told.message[:-1] if told.message.endswith(".") else told.message
    text += f" (your code, line {line})." if line else "."
    feedback.fail(text + (f" {hint}" if hint else ""), details=told.details)


def _raised_hint(exc, per_replica, k):
    """What the text of an exception from make_dataset / global_batch_size tells, worded as candidates."""
    text = str(exc.args[0]) if exc.args else ""
    stand_in = re.search(r"'StandInStrategy' object has no attribute '(\w+)'", text)
    if stand_in and stand_in[1] != "num_replicas_in_sync":
        return (
            f"That strategy stands in for a machine with {_replicas(k)}: as the prompt says, it has nothing but "
            f"num_replicas_in_sync, and your code asked it for {stand_in[1]}. Read only "
            "strategy.num_replicas_in_sync: it is the replica count on every machine."
        )
    if re.search(r"batch_size: Tensor conversion requested dtype int64 for Tensor with dtype int32", text):
        return (
            "Dataset.batch was given an int32 TensorFlow tensor as its batch size; it takes a Python int (or an "
            "int64 tensor). The batch size your code computed is a tensor (TensorFlow operations such as tf.multiply "
            "return tensors): compute it as a Python int, per_replica_batch * strategy.num_replicas_in_sync."
        )
    if "Cannot batch tensors with different shapes" in text:
        return (
            "Dataset.batch was given elements of different shapes. Every example here has the same shape, so "
            "the elements it batched were already batches (the last one smaller): the dataset was batched twice. "
            "Batch the examples once, by the global batch size. " + FIX
        )
    if "has no attribute 'num_replicas_in_sync'" in text:
        return (
            "Something that is no strategy stood where the strategy belongs: the test passed the strategy as "
            "the last argument. Check the order of the arguments wherever your code passes it on: "
            "global_batch_size(per_replica_batch, strategy)."
        )
    if "'int' object is not callable" in text:
        return (
            "A number was called like a function. One candidate: strategy.num_replicas_in_sync() with "
            "parentheses; it is a number (an attribute), not a method."
        )
    if "Batch size must be greater than zero" in text:
        return (
            f"Here it should be {per_replica} x {k} = {per_replica * k}: per_replica_batch * "
            "strategy.num_replicas_in_sync of the strategy passed in."
        )
    return ""


def _expect(ok, message):
    """Fail with `message` alone: the learner reads the teaching message, not pytest's assertion details."""
    if not ok:
        feedback.fail(message)


def _not_a_dataset(what, type_name):
    return (
        f"{what} returned a {type_name}; return a tf.data.Dataset (e.g. tf.data.Dataset.from_tensor_slices("
        "(features, labels)).batch(...)), not a distributed dataset or a list: the caller distributes it."
    )


def _batches(probe, n, per_replica, replicas):
    """The learner's batches (each with its parts' shapes and values); fail on a dataset that cannot be sized."""
    what = f"make_dataset(features[{n}], labels[{n}], per_replica_batch={per_replica}, {_describe(replicas)})"
    try:
        seen = probe("batches", n, per_replica, replicas)
    except Exception as exc:  # the learner's exception, told as feedback
        _fail_raised(what, exc, _raised_hint(exc, per_replica, _count(replicas)))
    _expect(seen["is_dataset"], _not_a_dataset(what, seen["type"]))
    bad = [b for b in seen["batches"] if "bad_element" in b]
    _expect(
        not bad,
        (
            f"{what} yields {bad[0]['bad_element'] if bad else ''} elements; each element must be a (features, labels) "
            "pair: build it from_tensor_slices((features, labels))."
        ),
    )
    _expect(
        not seen["truncated"],
        (
            f"{what} yields more than 500 batches for {n} examples; it looks endless (a .repeat()?). Every example "
            "must appear exactly once."
        ),
    )
    for b in seen["batches"]:
        x_shape, y_shape = b["x_shape"] or [], b["y_shape"] or []
        if len(x_shape) > 2:
            feedback.fail(
                f"{what}: a batch's features have shape {_shape(x_shape)}, not (examples, {FEATURES}). " + SEVERAL
            )
        if len(x_shape) + len(y_shape) < 3:
            feedback.fail(
                f"{what}: an element's parts have shapes {_shape(x_shape)} and {_shape(y_shape)}, a single example: "
                "the dataset was not batched. Batch it by the global batch size. " + FIX
            )
    return what, seen["batches"]


def _sizes(batches):
    return [(b["x_shape"] or b["y_shape"] or [0])[0] for b in batches]


def _sizes_problem(what, sizes, n, per_replica, k):
    """Say what is wrong with the batch sizes ("" when they are right), naming a cause only where they show it."""
    size = per_replica * k
    want = _expected_sizes(n, size)
    if sizes == want:
        return ""
    rest = f", and the last {n % size} examples in a smaller final batch" if n % size else ""
    head = (
        f"{what} gave batch sizes {_show(sizes)}; expected {_show(want)}: {per_replica} per replica x "
        f"{_replicas(k)} = {size} per batch{rest}."
    )
    if n % size and sizes == want[:-1]:
        return (
            head + f" The full batches are right, but the last {n % size} examples are missing: the final, "
            "smaller batch was dropped (drop_remainder=True does that). Keep it: every example must appear "
            "exactly once."
        )
    if k != 1 and sizes == _expected_sizes(n, per_replica):
        return (
            head + f" Every batch holds per_replica_batch = {per_replica} examples, one replica's share: the "
            "strategy splits each batch between its replicas, so batch by the global size. " + FIX
        )
    if k != 2 and sizes == _expected_sizes(n, per_replica * 2):
        return (
            head + f" Those are batches of {per_replica} x 2 for a strategy with {_replicas(k)}: the 2 did not "
            "come from this strategy. " + TWO_CANDIDATES
        )
    if k > 1 and per_replica // k > 0 and sizes == _expected_sizes(n, per_replica // k):
        return (
            head + f" Those are batches of {per_replica} // {k} = {per_replica // k}: per_replica_batch divided "
            "by the replica count. per_replica_batch is what EACH replica gets, so multiply. " + FIX
        )
    if sizes and all(s == size for s in sizes) and sum(sizes) > n:
        return (
            head + f" Every batch is full: {len(sizes)} x {size} = {sum(sizes)} examples for {n}, so some "
            "examples came more than once (a .repeat() that fills up the last batch does that). Every example "
            "must appear exactly once: the last batch is simply smaller."
        )
    if sum(sizes) != n:
        return (
            head + f" They hold {sum(sizes)} examples in all, for {n}: every example must appear exactly once. " + FIX
        )
    return head + " " + FIX


def test_global_batch_size(probe):
    seen = []
    for replicas, per_replica in [("mirrored", 16), ("one", 16), (4, 32), (8, 8)]:
        what = f"global_batch_size({per_replica}, {_describe(replicas)})"
        k = _count(replicas)
        try:
            got = probe("global_size", per_replica, replicas)
        except Exception as exc:  # the learner's exception, told as feedback
            hint = _raised_hint(exc, per_replica, k)
            if "'int' object is not callable" in (str(exc.args[0]) if exc.args else ""):
                try:  # does it work when the count may be called?
                    again = probe("global_size", per_replica, k, callable_count=True)
                except Exception:
                    again = None
                if again is not None and again["value"] == per_replica * k:
                    hint = (
                        f"Given a stand-in strategy whose num_replicas_in_sync can also be called, it returned the "
                        f"right {per_replica * k}: your code calls strategy.num_replicas_in_sync(). It is a "
                        "number (an attribute), not a method: write strategy.num_replicas_in_sync, without "
                        "parentheses."
                    )
            _fail_raised(what, exc, hint)
        seen.append((what, per_replica, k, got))
    wrong = [
        (what, p, k, got)
        for what, p, k, got in seen
        if got["value"] != p * k or got["type"] not in ("int", "int64", "int32")
    ]
    if not wrong:
        return
    told = "; ".join(f"{what} returned {got['repr']} (expected {p * k})" for what, p, k, got in wrong)
    if all(got["value"] == p * k for _, p, k, got in wrong):
        type_name = wrong[0][3]["type"]
        kind = (
            "a TensorFlow tensor (TensorFlow operations such as tf.multiply return tensors)"
            if "Tensor" in type_name
            else type_name
        )
        feedback.fail(
            f"{told}: the number is right, but its type is {kind}; return a Python int "
            "(per_replica_batch * strategy.num_replicas_in_sync is one when both are ints)."
        )
    if all(got["value"] == p * 2 for _, p, _, got in seen):
        feedback.fail(
            f"{told}. It returned per_replica_batch x 2 for every strategy (they have 2, 1, 4 and 8 "
            "replicas): the 2 did not come from the strategy passed in. " + TWO_CANDIDATES + " " + FIX
        )
    if all(got["value"] == p // k for _, p, k, got in seen):
        feedback.fail(
            f"{told}. It returned per_replica_batch divided by the replica count for every strategy. "
            "per_replica_batch is what EACH replica gets; the global batch is that many times the number "
            "of replicas, so multiply. " + FIX
        )
    if all(got["value"] == 0 for *_, got in seen):
        feedback.fail(
            f"{told}. It returned 0 for every strategy, while the strategies passed in have 2, 1, 4 and 8 replicas "
            "(strategy.num_replicas_in_sync): the count your code multiplied by did not come from the strategy. "
            "Counting devices instead (tf.config.list_physical_devices('GPU') finds no GPU on this grader) is one "
            "way to get 0. " + FIX
        )
    if all(got["value"] == p for _, p, _, got in seen):
        try:  # does it read the strategy of the current scope instead of its argument?
            scoped = probe("global_size", 32, 4, in_mirrored_scope=True)["value"]
        except Exception:
            scoped = None
        if scoped == 64:
            feedback.fail(
                f"{told}. Called inside the scope of a 2-replica MirroredStrategy, global_batch_size(32, a strategy "
                "with num_replicas_in_sync == 4) returned 64 = 32 x 2: your code reads the replica count of the "
                "strategy whose scope is current (tf.distribute.get_strategy()), not of the strategy passed in. "
                "Outside every scope that is the default strategy, with 1 replica. Use the argument: "
                "strategy.num_replicas_in_sync."
            )
        feedback.fail(
            f"{told}. It returned per_replica_batch unchanged for every strategy (1, 2, 4 and 8 replicas): "
            "the result does not depend on the replica count. " + FIX
        )
    feedback.fail(f"{told}. " + FIX)


def test_batches_have_global_size(probe):
    what, got = _batches(probe, 100, 8, "mirrored")
    problem = _sizes_problem(what, _sizes(got), 100, 8, 2)
    _expect(not problem, problem)


def test_follows_replica_count(probe):
    for replicas, per_replica, n in [("one", 8, 100), (4, 8, 100)]:
        what, got = _batches(probe, n, per_replica, replicas)
        problem = _sizes_problem(what, _sizes(got), n, per_replica, _count(replicas))
        _expect(not problem, problem)


def test_keeps_every_example_in_order(probe):
    n = 100
    x, y = data(n)
    what, got = _batches(probe, n, 8, "mirrored")
    for b in got:
        x_shape, y_shape = b["x_shape"], b["y_shape"]
        if len(x_shape) == 1 and len(y_shape) == 2 and y_shape[1] == FEATURES:
            feedback.fail(
                f"{what} yields elements whose first part has shape {_shape(x_shape)} and second part "
                f"{_shape(y_shape)}: the labels come first and the features ({FEATURES} columns) second. Each "
                "element must be (features_batch, labels_batch): put the features first (from_tensor_slices("
                "(features, labels)), or Dataset.zip((features_ds, labels_ds)))."
            )
        _expect(
            len(x_shape) == 2 and x_shape[1] == FEATURES and len(y_shape) == 1 and y_shape[0] == x_shape[0],
            (
                f"{what} yields a batch with parts of shapes {_shape(x_shape)} and {_shape(y_shape)}; expected "
                f"(examples, {FEATURES}) features and (examples,) labels, one row and one label per example."
            ),
        )
    rows = [row for b in got for row in b["x"]]
    labels = [label for b in got for label in b["y"]]
    ids = [round(r[0]) for r in rows]
    if len(rows) < n and ids == list(range(len(rows))):
        feedback.fail(
            f"{what} yields {len(rows)} examples in all; expected all {n}, each once. The first "
            f"{len(rows)} are there, in order: the last {n - len(rows)}, the final partial batch, were "
            "dropped (drop_remainder=True does that). Keep them."
        )
    if len(rows) > n:
        feedback.fail(
            f"{what} yields {len(rows)} examples in all; expected all {n}, each once: some examples come "
            "more than once. Do not repeat the data here; the caller decides how many epochs to run."
        )
    missing = sorted(set(range(n)) - set(ids))
    _expect(
        not missing,
        (
            f"{what} yields {len(rows)} examples in all; expected all {n}, each once. Missing: examples "
            f"{_show(missing, 12)}."
        ),
    )
    _expect(
        ids == list(range(n)),
        (
            f"{what} yields the examples in the order {_show(ids, 12)}; expected 0, 1, 2, ... as given. Keep the "
            "order: shuffling is the caller's choice (it would shuffle before calling make_dataset, or with its own "
            "seed)."
        ),
    )
    _expect(
        labels == y.tolist(),
        (
            f"{what}: the labels no longer match their features (first labels {labels[:10]}, expected "
            f"{y.tolist()[:10]}). Slice features and labels together: from_tensor_slices((features, labels))."
        ),
    )
    for got_row, want_row in zip(rows, x.tolist(), strict=True):
        _expect(
            all(abs(a - b) < 1e-6 for a, b in zip(got_row, want_row, strict=True)),
            (
                f"{what} changed feature values (got {[round(v, 4) for v in got_row]}, expected "
                f"{[round(v, 4) for v in want_row]}); batch them, do not transform them."
            ),
        )


def test_each_replica_gets_per_replica_batch(probe):
    n, per_replica = 64, 8
    made = f"make_dataset(features[{n}], labels[{n}], {per_replica}, strategy)"
    what = f"strategy.experimental_distribute_dataset({made})"
    try:
        seen = probe("replica_shapes", n, per_replica)
    except Exception as exc:  # the learner's exception, told as feedback
        _fail_raised(f"{what} with a 2-replica MirroredStrategy", exc, _raised_hint(exc, per_replica, 2))
    _expect(seen["is_dataset"], _not_a_dataset(made, seen["type"]))
    _expect(
        seen["bad_element"] is None,
        (
            f"{what} yields {seen['bad_element']} elements; each element must be a (features, labels) pair: build it "
            "from_tensor_slices((features, labels))."
        ),
    )
    _expect(
        not seen.get("truncated"),
        (
            f"{what} gave more than 500 steps for {n} examples; it looks endless (a .repeat()?). Every example must "
            "appear exactly once."
        ),
    )
    shapes = [step["x"] for step in seen["steps"]]
    for step in seen["steps"]:
        if all(len(s or []) == 1 for s in step["x"]) and all(len(s or []) == 2 for s in step["y"]):
            feedback.fail(
                f"{what}: each replica's first part has shape {_shape(step['x'][0])} and second part "
                f"{_shape(step['y'][0])}: the labels come first and the features second. Each element must be "
                "(features_batch, labels_batch)."
            )
        if any(len(s or []) > 2 for s in step["x"]):
            feedback.fail(f"{what} gave per-replica feature shapes {step['x']}, not (examples, {FEATURES}). " + SEVERAL)
    want = [[[per_replica, FEATURES], [per_replica, FEATURES]]] * (n // (2 * per_replica))
    if shapes == want:
        return
    half = per_replica // 2
    if shapes and all(s == [[half, FEATURES], [half, FEATURES]] for s in shapes):
        feedback.fail(
            f"{what} gave each replica {half} examples per step ({len(shapes)} steps), half of per_replica_batch = "
            f"{per_replica}: your batches held {per_replica} examples, and the strategy split each between the 2 "
            f"replicas. Batch by the global size, {per_replica} x 2 = {2 * per_replica}, so that each replica gets "
            f"{per_replica}. " + FIX
        )
    head = (
        f"{what} gave per-replica feature shapes {shapes[:4]}{' ...' if len(shapes) > 4 else ''} in "
        f"{len(shapes)} steps; expected {want[0]} in each of {len(want)} steps."
    )
    given = [sum((s or [0])[0] or 0 for s in step) for step in shapes]
    problem = _sizes_problem(made, given, n, per_replica, 2)
    if problem:
        feedback.fail(
            f"{head} experimental_distribute_dataset splits each batch between the replicas, so the batches "
            f"of your dataset held {_show(given)} examples. {problem}"
        )
    feedback.fail(
        f"{head} Your batches held the right numbers of examples, but each replica's features should be "
        f"(examples, {FEATURES}): one row of {FEATURES} features per example."
    )


def _call_mine(submission, name):
    try:
        return getattr(submission, name)()
    except Exception as exc:  # the learner's exception, told as feedback
        _fail_raised(f"{name}()", exc)


def _number(got):
    """(value, kind) of what a my_* function returned: its number (None if it has none) and what it is when it is no
    plain int ("" for an int, a NumPy integer included). NumPy values reach the test as 0-d arrays, TensorFlow
    tensors as TensorData (both have .shape, .dtype and .tolist())."""
    if isinstance(got, bool):
        return None, "a bool"
    if isinstance(got, int):
        return got, ""
    if isinstance(got, float):
        return got, "a float"
    shape, dtype = getattr(got, "shape", None), str(getattr(got, "dtype", ""))
    if shape is not None and tuple(shape) == () and hasattr(got, "tolist"):
        value = got.tolist()
        framework = getattr(got, "framework", "numpy")
        if framework == "numpy" and dtype.startswith(("int", "uint")):
            return int(value), ""
        library = "NumPy" if framework == "numpy" else "TensorFlow" if framework == "tensorflow" else framework
        kind = f"a {library} {dtype} " + ("tensor" if framework == "tensorflow" else "number")
        return (value if isinstance(value, (int, float)) and not isinstance(value, bool) else None), kind
    return None, f"a {type(got).__name__}"


def _check_count(name, got, want, explain, hints):
    """Fail unless `got` is the int `want`: "name() returned ...; explain" plus the hints that apply to its value."""
    value, kind = _number(got)
    shown = repr(value) if value is not None else repr(got)[:80]
    if value == want and not kind:
        return
    if value == want:
        feedback.fail(
            f"{name}() returned {shown}, {kind}: the number is right, but return a Python int. "
            "np.ceil and the / operator give floats, and TensorFlow operations give tensors; math.ceil(...) "
            "and -(-a // b) give an int."
        )
    feedback.fail(
        f"{name}() returned {shown}{f' ({kind})' if kind else ''}; {explain}"
        + "".join(f" {hint}" for match, hint in hints if value is not None and value == match)
    )


def test_my_run(submission, params):
    n, gpus, per_replica = params["examples"], params["gpus"], params["batch_per_replica"]
    want_batch = per_replica * gpus
    want_steps = -(-n // want_batch)
    run = (
        f"your run (the numbers in your prompt; other learners have others) has {n} examples on {gpus} GPUs "
        f"with {per_replica} per replica"
    )
    grader = (
        "Candidates: a hard-coded 2, or a count of the machine the code runs on (this grader has 2 logical "
        "devices, so a MirroredStrategy() built here has 2 replicas). Your run's GPUs are the number in your "
        "prompt, not this machine's."
    )
    got = _call_mine(submission, "my_global_batch")
    _check_count(
        "my_global_batch",
        got,
        want_batch,
        f"{run}, so one step takes {per_replica} x {gpus} = {want_batch} examples.",
        [
            (per_replica, "That is one replica's share, not the global batch."),
            (
                per_replica * 2 if gpus != 2 else None,
                f"That is {per_replica} x 2, and your run has {gpus} GPUs: the 2 did not come from your run. " + grader,
            ),
        ],
    )
    got = _call_mine(submission, "my_steps_per_epoch")
    _check_count(
        "my_steps_per_epoch",
        got,
        want_steps,
        f"{run}: batches of {want_batch}, every example once and the last batch smaller, so "
        f"ceil({n} / {want_batch}) = {want_steps} steps.",
        [
            (
                n // want_batch,
                f"{n} // {want_batch} leaves out the last, partial batch of {n % want_batch} "
                "examples: make_dataset keeps it, and it is a step too.",
            ),
            (
                n // per_replica,
                f"{n // per_replica} is the count for batches of {per_replica}, one "
                "replica's share: a step takes the global batch.",
            ),
            (
                -(-n // per_replica),
                f"{-(-n // per_replica)} is the count for batches of {per_replica}, one "
                "replica's share: a step takes the global batch.",
            ),
            (
                -(-n // (per_replica * 2)) if gpus != 2 else None,
                f"That is the count for batches of {per_replica} x 2 = {per_replica * 2}, and your run has "
                f"{gpus} GPUs: the 2 did not come from your run. " + grader,
            ),
        ],
    )
