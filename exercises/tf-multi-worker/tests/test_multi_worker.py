"""Hidden tests for tf-multi-worker. They run in the judge, with NumPy only.

The probe runs train_worker(workers, index, model_dir) in two real worker processes on loopback and reports each
worker's final weights and what it did (probes.py says what is noted, and how); one grading runs it once and every
test reads that run. The judge computes the expected weights itself: plain SGD on the mean squared error of a
Dense(1) from zeros, over global batches of PER_REPLICA_BATCH x 2 examples in the dataset's order. Where the
weights are wrong, it also computes what a few known slips give (another learning rate, another number of epochs)
and says which one the weights match; the step's notes (the optimizer's learning rate, an all-reduce of the
gradients, the per-example loss's shape) name the slip where they show it.

A test that needs only what the notes show (the shares, the batches) judges them even when a worker failed
afterwards, once both workers' first epochs are complete; the others need both workers to return their model.
"""

import json
import os
import re

import numpy as np
from probes import (
    EPOCHS,
    GRACE_S,
    LEARNING_RATE,
    MODEL_FILE,
    N_EXAMPLES,
    PER_REPLICA_BATCH,
    RUN_TIMEOUT_S,
    WORKERS,
    data,
)
from runner import feedback

GLOBAL_BATCH = PER_REPLICA_BATCH * WORKERS  # one CPU replica per worker
STEPS_PER_PASS = N_EXAMPLES // GLOBAL_BATCH
SHARE = N_EXAMPLES // WORKERS
TOL = 1e-4
_RUN = {}  # one run of the two workers per grading; every test reads it


def reference(rate=LEARNING_RATE, epochs=EPOCHS):
    """Kernel and bias after `epochs` passes of SGD at `rate` on global batches, as one device computes them."""
    x, y = (a.astype("float64") for a in data())
    kernel, bias = np.zeros((x.shape[1], 1)), np.zeros(1)
    for _ in range(epochs):
        for start in range(0, N_EXAMPLES, GLOBAL_BATCH):
            xb, yb = x[start : start + GLOBAL_BATCH], y[start : start + GLOBAL_BATCH]
            error = xb @ kernel + bias - yb
            kernel = kernel - rate * 2 * xb.T @ error / GLOBAL_BATCH
            bias = bias - rate * 2 * error.sum(axis=0) / GLOBAL_BATCH
    return [kernel, bias]


def _expect(ok, message):
    """Fail with `message` alone: the learner reads the teaching message, not pytest's assertion details."""
    if not ok:
        feedback.fail(message)


def _inner_line(message):
    """The error's text inside a tf.function's "in user code:" report (its call stack left out; "" when the error
    had none), or None for any other message."""
    lines = [line.strip() for line in str(message).splitlines() if line.strip()]
    if not lines or not lines[0].startswith("in user code"):
        return None
    named = [m for m in (re.match(r"^\w+(?:Error|Exception):(.*)$", line) for line in lines) if m]
    return named[-1].group(1).strip().rstrip(" :{")[:300] if named else ""


def _told(what, type_name, message):
    """`what` raised this: runner.feedback's sentence (the raw text kept as details), with the error line of a
    tf.function's report and TensorFlow's op prefix left out of the sentence."""
    got = feedback.raised(what, type_name, message)
    if got.cause:
        return got
    text = _inner_line(message)
    if text is None:
        text = str(message)
    text = feedback.framework_text(text).strip()  # step_fn(), not autograph's outer_factory.<locals>...tf__step_fn()
    said = feedback.raised(what, type_name, text)
    return feedback.Explained(said.message, got.details or feedback.clean_details(f"{type_name}: {message}"))


def _run(probe):
    if "seen" not in _RUN:
        try:
            _RUN["seen"] = probe("run")
        except Exception as exc:  # the probe's own failure, told with what it raised
            message = str(exc.args[0]) if exc.args else ""
            feedback.fail(
                _told("running train_worker on two workers", getattr(exc, "type_name", type(exc).__name__), message)
            )
    return _RUN["seen"]


def _events(seen, index, kind):
    return [e for e in seen["notes"][index] if e["kind"] == kind]


def _config(seen, index):
    """The TF_CONFIG worker `index` had when it created its strategy, parsed (None if unset or unreadable)."""
    made = _events(seen, index, "strategy")
    if not made or not made[0]["tf_config"]:
        return None
    try:
        return json.loads(made[0]["tf_config"])
    except ValueError:
        return {"unreadable": made[0]["tf_config"][:200]}


def _task_id(seen, index):
    made = _events(seen, index, "cluster")
    return made[0]["task_id"] if made else None


def _config_problem(seen, index):
    """Say what is wrong with worker `index`'s cluster, or None."""
    workers = _events(seen, index, "given")[0]["workers"] if _events(seen, index, "given") else None
    if not _events(seen, index, "strategy"):
        return (
            f"worker {index} never created a tf.distribute.MultiWorkerMirroredStrategy: create it in train_worker, "
            "after setting TF_CONFIG and before any other TensorFlow call."
        )
    config = _config(seen, index)
    if config is None:
        return (
            f"worker {index} created its MultiWorkerMirroredStrategy with no TF_CONFIG in the environment, so it "
            "formed a cluster of one and trained alone. TF_CONFIG is read when the strategy is created: set "
            'os.environ["TF_CONFIG"] = json.dumps({...}) before creating the strategy.'
        )
    if isinstance(config, dict) and "unreadable" in config:
        return f"worker {index}'s TF_CONFIG is not JSON: {config['unreadable']!r}. Write it with json.dumps(...)."
    cluster = config.get("cluster") if isinstance(config, dict) else None
    task = config.get("task") if isinstance(config, dict) else None
    if not isinstance(cluster, dict) or cluster.get("worker") != workers or set(cluster) != {"worker"}:
        return (
            f'worker {index}\'s TF_CONFIG has cluster {cluster!r}; it must be {{"worker": workers}}: the list '
            f"of addresses you were given ({workers}), the same, in the same order, on every worker."
        )
    if not isinstance(task, dict):
        return (
            f"worker {index}'s TF_CONFIG has task {task!r}; it must say who this worker is: "
            '"task": {"type": "worker", "index": index}.'
        )
    if task.get("type") != "worker":
        return (
            f'worker {index}\'s TF_CONFIG has task type {task.get("type")!r}, but its cluster has only a "worker" '
            "job: a task's type must be one of the cluster's jobs, so every worker here says \"type\": "
            '"worker" (with its own index). Without a "chief" job, worker 0 is the chief already.'
        )
    if task.get("index") != index:
        return (
            f"worker {index} was started with index={index}, but its TF_CONFIG said task {task!r} (task index "
            f'{task.get("index")}). Each worker must give its own index: "task": {{"type": "worker", '
            '"index": index}. Two workers with one index both try to listen on that address, and the cluster '
            "never forms."
        )
    cluster_notes = _events(seen, index, "cluster")
    if cluster_notes and cluster_notes[0]["replicas"] != WORKERS:
        return (
            f"worker {index}'s strategy had num_replicas_in_sync={cluster_notes[0]['replicas']}, not {WORKERS} "
            "(one CPU replica per worker)."
        )
    return None


def _error_hint(message):
    if re.search(r"takes 1 positional argument but 2 were given", message) and "step" in message:
        return (
            "If that function is the one you give strategy.run: strategy.run(fn, args=...) calls fn(*args), so "
            "args=(batch) (no comma: the batch itself) passes an (x, y) batch as two arguments; write args=(batch,)."
        )
    if "Collective ops must be configured at program startup" in message:
        return (
            "TensorFlow raises this when MultiWorkerMirroredStrategy is created after another TensorFlow "
            "operation ran in the process (building a dataset, a model or a tensor): set TF_CONFIG, then create "
            "the strategy first, before any other TensorFlow call in train_worker."
        )
    if "Could not start gRPC server" in message:
        return (
            "A worker could not listen on the address its TF_CONFIG task index points to, because another "
            "worker listens there already."
        )
    if "unshardable source dataset" in message:
        return (
            "AutoShardPolicy.FILE shards by input files, and this dataset is made from tensors in memory: "
            "leave the default policy (AUTO), or use AutoShardPolicy.DATA."
        )
    return ""


def _plain_variables(seen):
    """Name a worker whose optimizer was given variables not made under strategy.scope(), or None."""
    for index in range(WORKERS):
        for e in _events(seen, index, "apply"):
            if "distributed" in e and not all(e["distributed"]):
                return (
                    f"On worker {index} the optimizer was given variables that are not distributed: the model was "
                    "built outside `with strategy.scope():`. Build the model and the optimizer inside the "
                    "strategy's scope, so that their variables are mirrored on every replica."
                )
    return None


def _describe(w, errors):
    """One sentence on why worker w gave no result."""
    i = w["index"]
    if w["stopped"]:
        return (
            f"Worker {i} was still running {GRACE_S:.0f} s after the other worker had failed, and was stopped "
            "(a worker waits for all the others at every collective step)."
        )
    if w["timed_out"]:
        return f"Worker {i} did not finish within {RUN_TIMEOUT_S:.0f} s."
    if w["error"]:
        return errors[i].message
    return f"Worker {i} died without a result (exit code {w['exit_code']})."


def _unequal_reduces(seen, bad):
    """When a worker failed or waited in a collective and the workers ran strategy.reduce eagerly a different number of
    times, say so (None otherwise): each such reduce is a collective of every worker."""
    collective = any(
        w["timed_out"] or w["stopped"] or (w["error"] and "ollective" in str(w["error"]["message"])) for w in bad
    )
    counts = [sum(1 for e in _events(seen, i, "reduce") if e.get("eager")) for i in range(WORKERS)]
    if not collective or len(set(counts)) == 1:
        return None
    many, few = sorted(range(WORKERS), key=lambda i: -counts[i])[:2]
    times = {0: "never", 1: "once", 2: "twice"}
    said = [times.get(counts[i], f"{counts[i]} times") for i in (many, few)]
    return (
        f"Worker {many} called strategy.reduce {said[0]} outside a tf.function, worker {few} {said[1]}. Under "
        "MultiWorkerMirroredStrategy, strategy.reduce combines the replicas of every worker with a collective "
        "operation that every worker must join, in the same order: run on one worker only (the chief, to log a loss, "
        "say), it meets the other worker's next collective, and the workers' collectives "
        "break. Reduce on every worker (inside the step function, say) and print on the chief only."
    )


def _finished(seen):
    """Both workers' results; fail, saying why, when a worker gave none."""
    bad = [w for w in seen["workers"] if w["value"] is None]
    if not bad:
        return seen["workers"]
    raised = [w for w in bad if w["error"] and not w["stopped"] and not w["timed_out"]]
    errors = {
        w["index"]: _told(f"worker {w['index']}'s train_worker", w["error"]["type"], w["error"]["message"])
        for w in raised
    }
    same = {_told("train_worker", w["error"]["type"], w["error"]["message"]).message for w in raised}
    if len(bad) == WORKERS and len(raised) == WORKERS and len(same) == 1:
        first = raised[0]["error"]
        said = [_told("train_worker on both workers", first["type"], first["message"]).message]
    else:
        said = [_describe(w, errors) for w in bad]
    hints = dict.fromkeys(_error_hint(w["error"]["message"]) for w in raised)
    problems = [p for p in (_config_problem(seen, i) for i in range(WORKERS)) if p]
    plain = _plain_variables(seen)
    gone = [
        f"Worker {i} deleted {_shown(seen, e['path'])} ({e['api']}), where the chief saves model_dir/{MODEL_FILE}."
        for i, e in _removals(seen, range(WORKERS))[:1]
    ]
    unequal = _unequal_reduces(seen, bad)
    if unequal:
        said = [
            "Worker 0 and worker 1 stopped in a collective operation: TensorFlow aborted the workers' collectives "
            "(its own text is in the details)."
            if raised
            else " ".join(said),
            unequal,
        ]
        hints = {}
    text = " ".join([*said, *[h for h in hints if h], *problems[:1], *([plain] if plain else []), *gone])
    head = text.split(" ", 1)[0]
    feedback.fail(
        text if "_" in head else text[:1].upper() + text[1:],
        details="\n".join(f"worker {i}: {e.details}" for i, e in errors.items()),
    )


def _weights(w):
    arrays = w["arrays"]
    names = sorted(arrays, key=lambda k: int(k[1:]))
    return [np.asarray(arrays[k]["data"], dtype="float64").reshape(arrays[k]["shape"]) for k in names]


def _models(seen):
    """Both workers' final weights; fail when a worker did not return a model (its weights cannot be compared)."""
    workers = _finished(seen)
    for w in workers:
        _expect(
            w["value"].get("type") is not None and w["arrays"],
            (
                f"worker {w['index']}'s train_worker returned {_kind(w)}, not the trained Keras model, so its final "
                "weights cannot be compared: end train_worker with `return model` (on every worker)."
            ),
        )
    return [_weights(w) for w in workers]


def _kind(w):
    name = w["value"].get("type")
    return "None" if name in (None, "NoneType") else f"a {name}"


def _diff(weights, want):
    if len(weights) != len(want) or any(np.shape(a) != np.shape(b) for a, b in zip(weights, want, strict=True)):
        return float("inf")
    return max(float(np.max(np.abs(a - b))) for a, b in zip(weights, want, strict=True))


def _passes(seen, index):
    """Worker `index`'s noted passes over a distributed dataset, in order: (steps, ended), where steps holds, per
    step, per local replica, the example ids."""
    passes, order, ended = {}, [], set()
    for e in seen["notes"][index]:
        if e["kind"] == "end":
            ended.add(e["iterator"])
        if e["kind"] != "batch" or "replicas" not in e:
            continue
        if e["iterator"] not in passes:
            passes[e["iterator"]] = []
            order.append(e["iterator"])
        passes[e["iterator"]].append(e["replicas"])
    return [(passes[k], k in ended) for k in order]


def _epochs(seen, index):
    """Worker `index`'s epochs as (steps, complete): each pass cut where an example comes back (a dataset repeated
    before batching runs several epochs in one pass). An epoch is complete when its pass ended, another epoch
    followed it, or the worker returned."""
    epochs = []
    for steps, ended in _passes(seen, index):
        chunk, ids = [], set()
        for step in steps:
            mine = {i for replica in step for i in replica}
            if chunk and mine & ids:
                epochs.append([chunk, True])
                chunk, ids = [], set()
            chunk.append(step)
            ids |= mine
        if chunk:
            epochs.append([chunk, ended])
        if epochs:
            epochs[-1][1] = epochs[-1][1] or ended
    for epoch in epochs[:-1]:
        epoch[1] = True
    if epochs and seen["workers"][index]["value"] is not None:
        epochs[-1][1] = True
    return [(steps, complete) for steps, complete in epochs]


def _first_epochs(seen, complete=False):
    """Each worker's first noted epoch (per step, per local replica, the example ids), or None if any is missing
    (or, with `complete`, not complete)."""
    firsts = [_epochs(seen, i)[:1] for i in range(WORKERS)]
    if not all(firsts) or (complete and not all(f[0][1] for f in firsts)):
        return None
    return [f[0][0] for f in firsts]


def _judged_epochs(seen):
    """The first epochs to judge: as soon as both are complete (a worker may fail later); otherwise both workers
    must have finished (this fails if not), and what was seen is judged, or None if nothing was."""
    firsts = _first_epochs(seen, complete=True)
    if firsts is not None:
        return firsts
    _finished(seen)
    return _first_epochs(seen)


def _api(seen, index):
    calls = _events(seen, index, "distribute")
    return calls[0] if calls else None


def _ids(ids):
    ids = sorted(ids)
    return f"{ids[:12]}{' ...' if len(ids) > 12 else ''}"


def _alone(seen):
    """Name the worker whose strategy was not a cluster of two (it then shards nothing), or None."""
    for index in range(WORKERS):
        replicas = [e["replicas"] for e in _events(seen, index, "cluster")]
        if replicas and replicas[0] != WORKERS:
            return (
                f"worker {index}'s strategy had num_replicas_in_sync={replicas[0]}, not a cluster of {WORKERS} "
                "(see the cluster test), so there was nothing to share the data with."
            )
    return None


def _shuffled(seen):
    return any(_events(seen, i, "shuffle") for i in range(WORKERS))


def _sharded_twice(seen):
    """Name a worker that sharded by hand and then let experimental_distribute_dataset shard again, or None."""
    for index in range(WORKERS):
        api = _api(seen, index) or {}
        if (
            _events(seen, index, "shard")
            and api.get("api") == "experimental_distribute_dataset"
            and (api.get("policy") != "OFF")
        ):
            return (
                f"worker {index} called Dataset.shard(...) itself and then gave the dataset to "
                f"experimental_distribute_dataset, whose auto-sharding (policy {api.get('policy')}) splits it "
                "again: each worker kept a part of its part. Shard once: leave the .shard() out (the strategy "
                "shards for you), or use distribute_datasets_from_function, which shards nothing by itself."
            )
    return None


SHUFFLE = (
    "Dataset.shuffle was called: each worker shuffles in an order of its own, so the workers' parts of a global "
    "batch no longer split one batch, and the steps no longer follow the dataset's order. Feed make_dataset() "
    "in its order (no shuffle), as the task asks."
)


def _share_problem(seen, firsts):
    """Say how the workers' first-epoch shares go wrong (overlap, or examples nobody read), or None."""
    if firsts is None:
        return None
    read = [{i for step in first for replica in step for i in replica} for first in firsts]
    both = read[0] & read[1]
    if both:
        api = _api(seen, 0) or {}
        if _alone(seen):
            fix = _alone(seen)
        elif api.get("api") == "distribute_datasets_from_function" and not _events(seen, 0, "shard"):
            fix = (
                "distribute_datasets_from_function does not shard for you, and your dataset_fn called no "
                "Dataset.shard: keep one part per input pipeline with dataset.shard(context.num_input_pipelines, "
                "context.input_pipeline_id) before batching."
            )
        elif api.get("policy") == "OFF":
            fix = (
                "Your dataset has AutoShardPolicy.OFF, so every worker reads all of it: leave the default (AUTO) or "
                "use AutoShardPolicy.DATA, and experimental_distribute_dataset gives each worker its own part."
            )
        elif _shuffled(seen):
            fix = SHUFFLE
        else:
            fix = (
                "Candidates: a dataset that differs from worker to worker before it is split (each worker must "
                "start from the same make_dataset(), in the same order), or a split by hand that gives two workers "
                "one part (experimental_distribute_dataset with the default auto-shard policy splits it for you; in "
                "distribute_datasets_from_function, shard by the input context)."
            )
        twice = (
            ""
            if _alone(seen)
            else ", so those examples counted twice in the step that read them and the "
            "cluster did the work of fewer workers"
        )
        return (
            f"in their first epoch worker 0 and worker 1 both trained on the examples {_ids(both)} ({len(both)} of "
            f"{N_EXAMPLES}): the workers read the same data{twice}. {fix}"
        )
    missing = set(range(N_EXAMPLES)) - read[0] - read[1]
    if missing:
        why = _sharded_twice(seen) or "the workers' parts must together cover the whole dataset."
        return (
            f"in their first epoch no worker trained on the examples {_ids(missing)} ({len(missing)} of "
            f"{N_EXAMPLES}): {why}"
        )
    return None


def _batch_problem(seen, firsts):
    """Say how the first epoch's batches differ from PER_REPLICA_BATCH per replica, STEPS_PER_PASS steps, or None."""
    if firsts is None:
        return None
    for index, steps in enumerate(firsts):
        sizes = sorted({len(replica) for step in steps for replica in step})
        if sizes != [PER_REPLICA_BATCH]:
            via = (_api(seen, index) or {}).get("api")
            how = (
                f"batch by context.get_per_replica_batch_size(PER_REPLICA_BATCH * context.num_replicas_in_sync) "
                f"(= {PER_REPLICA_BATCH}) in dataset_fn"
                if via == "distribute_datasets_from_function"
                else f"batch the dataset by the global batch, PER_REPLICA_BATCH * strategy.num_replicas_in_sync "
                f"(= {GLOBAL_BATCH}); the strategy splits each global batch among the replicas of every worker"
            )
            return (
                f"on worker {index} a replica took {' or '.join(map(str, sizes))} examples per step, not "
                f"PER_REPLICA_BATCH = {PER_REPLICA_BATCH}: with {WORKERS} workers of one replica each, a step must "
                f"learn from a global batch of {GLOBAL_BATCH}. To get it, {how}."
            )
        if len(steps) != STEPS_PER_PASS:
            read = sum(len(replica) for step in steps for replica in step)
            why = ""
            if read > SHARE:
                why = f" It went through {read} examples, more than its share of {SHARE}: " + (
                    _alone(seen)
                    or "each worker must read only its own part of the dataset (see the test on the workers' shares)."
                )
            elif read < SHARE:
                why = f" It went through {read} examples, fewer than its share of {SHARE}: " + (
                    _sharded_twice(seen) or "each worker must read its whole part of the dataset."
                )
            return (
                f"worker {index} took {len(steps)} steps in its first epoch; {N_EXAMPLES} examples in global "
                f"batches of {GLOBAL_BATCH} make {STEPS_PER_PASS}.{why}"
            )
    return None


def _in_order(firsts):
    """Whether step k of the first epoch learned from examples k*GLOBAL_BATCH .. (k+1)*GLOBAL_BATCH-1, all workers
    together."""
    if firsts is None or len({len(f) for f in firsts}) != 1:
        return False
    for k, steps in enumerate(zip(*firsts, strict=True)):
        ids = sorted(i for step in steps for replica in step for i in replica)
        if ids != list(range(k * GLOBAL_BATCH, (k + 1) * GLOBAL_BATCH)):
            return False
    return True


def _unseen(what, seen):
    """When no batch was seen, judge by the weights; say so, and that this test cannot confirm its part."""
    diff = min(_diff(w, reference()) for w in _models(seen))
    _expect(
        diff < TOL,
        (
            f"{what} could not be seen (no batch was taken from a distributed dataset in a Python loop), and the final "
            f"weights differ from training on global batches of {GLOBAL_BATCH} that cover the dataset once per epoch "
            f"by up "
            f"to {diff:.3g}, so this test cannot confirm it."
        ),
    )


def test_both_workers_finish(probe):
    seen = _run(probe)
    _models(seen)


def test_workers_form_one_cluster(probe):
    seen = _run(probe)
    for index in range(WORKERS):
        problem = _config_problem(seen, index)
        _expect(problem is None, problem)


def test_each_worker_reads_its_own_share(probe):
    seen = _run(probe)
    firsts = _judged_epochs(seen)
    if firsts is None:
        _unseen("Which examples each worker read", seen)
        return
    problem = _share_problem(seen, firsts)
    _expect(problem is None, problem)


def test_global_batch(probe):
    seen = _run(probe)
    firsts = _judged_epochs(seen)
    if firsts is None:
        _unseen("The batch sizes", seen)
        return
    problem = _batch_problem(seen, firsts)
    _expect(problem is None, problem)


def _shape(shape):
    return "(" + ", ".join("?" if d is None else str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _step_slips(seen):
    """What the step's notes show that changes the weights (each one isolated by what was noted), in words."""
    slips = []
    wrong = sorted({r for r in _rates(seen) if r is not None and abs(r - LEARNING_RATE) > 1e-7})
    if wrong:
        scaled = any(abs(r - LEARNING_RATE * WORKERS) < 1e-7 for r in wrong)
        slips.append(
            f"the optimizer was made with learning_rate={wrong[0]:g}, not LEARNING_RATE = {LEARNING_RATE:g}"
            + (
                " (LEARNING_RATE x num_replicas_in_sync: the task asks for SGD(LEARNING_RATE) itself; dividing "
                "each replica's loss by the global batch already makes the summed gradient the global "
                "batch's mean)"
                if scaled
                else ""
            )
        )
    for e in _events(seen, 0, "average_loss"):
        shape = e.get("shape")
        known = shape and all(isinstance(d, int) for d in shape)
        if shape and len(shape) >= 2 and shape[-1] != 1 and not (known and int(np.prod(shape)) == max(shape)):
            b = PER_REPLICA_BATCH
            slips.append(
                f"tf.nn.compute_average_loss got per-example losses of shape {_shape(shape)}, where one loss "
                f"per example of a replica's batch of {b} has shape ({b},) (or ({b}, 1)): a ({b},) tensor "
                f"and a ({b}, 1) one (tf.squeeze(y) and the prediction, say) broadcast to a square and "
                "compare every prediction with every label. Keep y and the prediction the same shape"
            )
            break
    sizes = {e.get("global_batch_size") for e in _events(seen, 0, "average_loss")} - {None}
    if sizes and sizes != {GLOBAL_BATCH}:
        slips.append(
            f"tf.nn.compute_average_loss was given global_batch_size={sorted(sizes)[0]}, not the global batch "
            f"{GLOBAL_BATCH} (PER_REPLICA_BATCH * strategy.num_replicas_in_sync)"
        )
    shapes = [e["shapes"] for e in _events(seen, 0, "apply") if e.get("shapes")]
    for e in _events(seen, 0, "all_reduce"):
        if shapes and e.get("shapes") == shapes[0] and e.get("op") == "SUM":
            slips.append(
                "your replica step summed the gradients across the replicas itself (an all_reduce of values "
                "shaped like the model's variables) and then gave them to optimizer.apply_gradients, which "
                "sums the replicas' gradients again: they were summed twice. Leave the sum to the optimizer"
            )
            break
    return slips


def _rates(seen):
    """The learning rates of the optimizers the workers made (None where one was not a number)."""
    return [e["learning_rate"] for i in range(WORKERS) for e in _events(seen, i, "optimizer")]


def _which_slip(seen, w0):
    """Say what the wrong weights match, naming a cause where the notes isolate it."""
    slips = _step_slips(seen)
    if slips:
        return " On worker 0, " + "; and ".join(slips) + "."
    for epochs in range(1, 2 * EPOCHS + 1):
        if epochs != EPOCHS and _diff(w0, reference(epochs=epochs)) < TOL:
            return (
                f" They are exactly the weights of {epochs} epoch{'s' if epochs != 1 else ''} of that training: "
                f"train EPOCHS = {EPOCHS} epochs (a loop such as range(1, EPOCHS) runs one fewer)."
            )
    for factor, words in ((WORKERS, "twice as large"), (1 / WORKERS, "half as large")):
        if _diff(w0, reference(rate=LEARNING_RATE * factor)) >= TOL:
            continue
        said = (
            f" They are exactly the weights of steps {words} (SGD at a learning rate of "
            f"{LEARNING_RATE * factor:g} instead of {LEARNING_RATE:g})."
        )
        rates = _rates(seen)
        averaged = _events(seen, 0, "average_loss")
        candidates = []
        if not rates or None in rates:
            candidates.append("a learning rate other than LEARNING_RATE")
        if factor > 1 and not _events(seen, 0, "apply"):
            candidates.append("the gradients summed across the replicas twice (by hand, then by the optimizer)")
        if not averaged:
            candidates.append(
                f"each replica's loss divided by its own {PER_REPLICA_BATCH} examples (a mean: tf.reduce_mean, or a "
                f"Keras loss object's default reduction), not by the global batch of {GLOBAL_BATCH}, while the "
                "optimizer sums the gradients of all replicas"
                if factor > 1
                else f"each replica's loss divided by more than the global batch of {GLOBAL_BATCH}"
            )
        fix = (
            f" Divide the sum of each replica's per-example losses by the global batch: "
            f"tf.nn.compute_average_loss(per_example, global_batch_size={GLOBAL_BATCH})."
        )
        if len(candidates) == 1 and not averaged:
            return (
                said + " The learning rate was LEARNING_RATE and the optimizer alone summed the gradients, and "
                "your replica step never called tf.nn.compute_average_loss, which leaves the loss: "
                + candidates[0]
                + "."
                + fix
            )
        if candidates:
            return said + " Candidates: " + "; ".join(candidates) + "." + fix
        return (
            said + " Candidates: a loss that is not the mean squared error of each example (its sum over the "
            "replica divided by the global batch), or a step that changes the gradients before the optimizer "
            "applies them."
        )
    return None


def test_trains_like_one_device_on_the_global_batch(probe):
    seen = _run(probe)
    w0, w1 = _models(seen)
    apart = _diff(w0, w1)
    _expect(
        apart < 1e-5,
        (
            f"worker 0 and worker 1 end with different weights (max difference {apart:.3g}). Create the model and the "
            "optimizer inside strategy.scope() and apply the gradients in the function you give strategy.run, so that "
            "the replicas' gradients are summed across the workers and every copy takes the same step."
        ),
    )
    diff = _diff(w0, reference())
    if diff < TOL:
        return
    said = (
        f"the final weights differ by up to {diff:.3g} from what {EPOCHS} epochs of SGD(LEARNING_RATE) on global "
        f"batches of {GLOBAL_BATCH}, in the dataset's order, give on one device."
    )
    firsts = _first_epochs(seen)
    if _config_problem(seen, 0) or _config_problem(seen, 1):
        why = " The workers did not form one cluster of two (see the cluster test), so they did not train together."
    elif _share_problem(seen, firsts) or _batch_problem(seen, firsts):
        why = (
            " The data each step learned from was not one global batch of distinct examples (see the tests on the "
            "workers' shares and on the global batch)."
        )
    elif firsts is not None and not _in_order(firsts):
        why = (
            " " + SHUFFLE
            if _shuffled(seen)
            else (
                " The steps did not learn from the dataset's global batches in order (step k from examples "
                f"{GLOBAL_BATCH}k to {GLOBAL_BATCH}k+{GLOBAL_BATCH - 1}, shared between the workers): "
                "keep the order of "
                "make_dataset() (no shuffle)."
            )
        )
    else:
        seen_steps = " Each step took the right examples, so the difference is in the step itself." if firsts else ""
        why = seen_steps + (
            _which_slip(seen, w0)
            or (
                " Check that each replica's loss is the squared error of each of its examples (y and the prediction of "
                f"one shape), summed and divided by the global batch (tf.nn.compute_average_loss(per_example, "
                f"global_batch_size={GLOBAL_BATCH})), that the gradients are applied once, with SGD(LEARNING_RATE), "
                "inside strategy.run, and that training runs EPOCHS epochs"
                + ("" if firsts else f" of global batches of {GLOBAL_BATCH} in the dataset's order (no shuffle)")
                + " on the model from build_model()."
            )
        )
    feedback.fail(said + why)


def test_optimizer_made_in_scope(probe):
    seen = _run(probe)
    made = [_events(seen, i, "optimizer") for i in range(WORKERS)]
    if not all(made):
        _finished(seen)
    for index, optimizers in enumerate(made):
        _expect(
            optimizers, f"worker {index} never made a Keras optimizer: make SGD(LEARNING_RATE) inside strategy.scope()."
        )
        outside = [e for e in optimizers if e.get("in_scope") is False]
        _expect(
            not outside,
            (
                f"worker {index} made its optimizer ({outside[0]['type'] if outside else ''}) outside "
                "`with strategy.scope():`. Step 2 of the task asks for the model and the SGD(LEARNING_RATE) optimizer "
                "both to be made inside the strategy's scope."
            ),
        )


def test_gradients_applied_inside_strategy_run(probe):
    seen = _run(probe)
    applied = [_events(seen, i, "apply") for i in range(WORKERS)]
    if not all(applied):
        _finished(seen)
    for index, calls in enumerate(applied):
        _expect(
            calls,
            (
                f"worker {index} never called the optimizer's apply_gradients: apply the gradients with the "
                "SGD(LEARNING_RATE) optimizer, optimizer.apply_gradients(zip(grads, model.trainable_variables)), "
                "inside "
                "the function you give strategy.run."
            ),
        )
        outside = [e["where"] for e in calls if e.get("where") not in (None, "replica")]
        where = {
            "cross-replica": "in the strategy's cross-replica context (inside strategy.scope(), outside strategy.run)",
            "none": "outside strategy.run (after it returned, for example on values taken from strategy.reduce)",
        }
        _expect(
            not outside,
            (
                f"worker {index} called optimizer.apply_gradients {where.get(outside[0] if outside else '', '')}. "
                "The task "
                "asks for the gradients to be applied inside the function you give strategy.run: there each replica "
                "applies its own gradients, and the optimizer sums them across all replicas of all workers itself."
            ),
        )


def _shown(seen, path):
    top = seen["model_dir"]
    if path == top:
        return "model_dir itself"
    if top.startswith(path.rstrip(os.sep) + os.sep):
        return "a folder that holds model_dir"
    inside = os.path.relpath(path, top)
    if not inside.startswith(".."):
        return f"model_dir/{inside}"
    if path.startswith(top):  # model_dir + "name": a sibling whose name starts with model_dir's
        return f'model_dir + "{path[len(top) :]}"'
    return "a path outside model_dir"


def _holds_model(seen, path):
    """Whether deleting `path` deletes model_dir/model.keras (the file itself, or a folder that holds it)."""
    target = os.path.join(seen["model_dir"], MODEL_FILE)
    return path == target or target.startswith(path.rstrip(os.sep) + os.sep)


def _removals(seen, indices):
    """(worker, delete note) for each deletion by those workers of the chief's model file or a folder holding it."""
    return [(i, e) for i in indices for e in _events(seen, i, "delete") if _holds_model(seen, e["path"])]


def test_only_the_chief_writes_the_model(probe):
    seen = _run(probe)
    target = os.path.join(seen["model_dir"], MODEL_FILE)
    chief = {e["path"] for e in _events(seen, 0, "save")}
    for index in range(1, WORKERS):
        mine = {e["path"] for e in _events(seen, index, "save")}
        shared = sorted(p for p in mine if p in chief or p == target)
        whose = "the chief's model file" if target in shared else "a path worker 0 (the chief) writes too"
        if shared and _task_id(seen, index) == 0:
            fix = (
                " Its strategy said cluster_resolver.task_id == 0, so it took itself for the chief: its "
                "TF_CONFIG made it task 0 of its own cluster (see the cluster test). With TF_CONFIG right, "
                "task_id == 0 holds on worker 0 alone."
            )
        else:
            fix = (
                " Save to model_dir only on the chief (strategy.cluster_resolver.task_id == 0); another worker "
                "saves to a temporary path of its own and deletes it (or does not save)."
            )
        _expect(
            not shared,
            (
                f"worker {index} wrote {', '.join(_shown(seen, p) for p in shared[:3])}, {whose}: two workers "
                "writing one "
                "path race each other, and nothing checks which write wins." + fix
            ),
        )
        gone = _removals(seen, [index])
        if gone:
            e = gone[0][1]
            what = _shown(seen, e["path"])
            feedback.fail(
                f"worker {index} deleted {what} ({e['api']})"
                + ("" if e["path"] == target else f", which holds the chief's model_dir/{MODEL_FILE}")
                + ": a worker that is not the chief must leave the chief's file alone, and the two race each other "
                "as the chief's save does. Delete only a temporary folder of this worker's own that it saved into "
                "(one from tempfile.mkdtemp(), say), or do not save on this worker."
            )
    _finished(seen)


CHIEF_RULE = (
    'without a "chief" job in the cluster, every worker\'s task_type is "worker" and the chief is the '
    "one whose strategy.cluster_resolver.task_id == 0"
)


def _no_model_file(seen):
    """Say where the workers saved (and what they deleted), when model_dir/model.keras was not there afterwards."""
    paths = [sorted({e["path"] for e in _events(seen, i, "save")}) for i in range(WORKERS)]
    saved = [sorted({_shown(seen, p) for p in mine}) for mine in paths]
    head = f"after training, model_dir held {seen['files'][:6]}: no model_dir/{MODEL_FILE}."
    target = f"model_dir/{MODEL_FILE}"
    gone = _removals(seen, range(WORKERS))
    if gone:
        index, e = gone[0]
        who = "worker 0 itself" if index == 0 else f"worker {index}"
        return (
            head
            + (f" Worker 0, the chief, saved {target}, and" if target in saved[0] else " And")
            + f" {who} deleted {_shown(seen, e['path'])} ({e['api']})"
            + (", so the chief's file went with it." if target in saved[0] else ".")
            + " Delete only a temporary folder of a worker's own that it saved into (one from tempfile.mkdtemp(), "
            "say), never model_dir or the chief's file."
        )
    if not saved[0]:
        return (
            head + f" Worker 0, the chief (its cluster_resolver.task_id is 0), saved nothing: let it save the "
            f'trained model with model.save(os.path.join(model_dir, "{MODEL_FILE}")).'
        )
    said = f" Worker 0, the chief (its cluster_resolver.task_id is 0), saved to {', '.join(saved[0][:3])}"
    beside = [p for p in saved[0] if p.startswith("model_dir + ")]
    if beside:
        return (
            head + said + f": {beside[0]} names a file beside model_dir, not in it (model_dir does not end with a "
            f'separator, and + adds none). Build the path with os.path.join(model_dir, "{MODEL_FILE}").'
        )
    if all(p == "a path outside model_dir" for p in saved[0]):
        removed = [
            e
            for e in _events(seen, 0, "delete")
            if any(p == e["path"] or p.startswith(e["path"].rstrip(os.sep) + os.sep) for p in paths[0])
        ]
        if removed:
            return (
                head + said + f" and deleted it again ({removed[0]['api']}), as a worker that "
                "is not the chief does: the check that picks the chief was false on worker 0. "
                + CHIEF_RULE[:1].upper()
                + CHIEF_RULE[1:]
                + "."
            )
        return (
            head + said + ". Candidates: the check that picks the chief was false on worker 0 "
            f"({CHIEF_RULE}), or the path was built wrong: the chief's file is os.path.join(model_dir, "
            f'"{MODEL_FILE}").'
        )
    return head + said + f": the chief's file must be model_dir/{MODEL_FILE}."


def test_saved_model_holds_the_trained_weights(probe):
    seen = _run(probe)
    workers = _finished(seen)
    _expect(seen["loaded"] is not None, _no_model_file(seen) if seen["loaded"] is None else "")
    loaded = seen["loaded"]
    if loaded["value"] is None:
        if loaded["error"]:
            told = _told(
                f"keras.models.load_model on model_dir/{MODEL_FILE}",
                loaded["error"]["type"],
                loaded["error"]["message"],
            )
        else:
            told = feedback.Explained(
                f"keras.models.load_model on model_dir/{MODEL_FILE} "
                + ("did not finish." if loaded["timed_out"] else f"exited with code {loaded['exit_code']}.")
            )
        feedback.fail(
            f'{told.message} Save the trained model with model.save(os.path.join(model_dir, "{MODEL_FILE}")).',
            details=told.details,
        )
    chief = workers[0]
    returned = chief["value"].get("type") is not None and chief["arrays"]
    want, whose = (
        (_weights(chief), "the chief's trained model")
        if returned
        else (
            reference(),
            "the trained weights (your train_worker returned no model to compare with, so the expected ones)",
        )
    )
    diff = _diff(_weights(loaded), want)
    untrained = diff >= (1e-6 if returned else TOL) and all(not np.any(a) for a in _weights(loaded))
    _expect(
        not untrained,
        (
            f"model_dir/{MODEL_FILE} holds the weights build_model() starts from (all zeros), not the trained ones: "
            "it was "
            "saved before the training loop ran, or from a model that was not trained. Save the trained model after "
            "training."
        ),
    )
    _expect(
        diff < (1e-6 if returned else TOL),
        (f"model_dir/{MODEL_FILE} differs from {whose} by up to {diff:.3g}: save it after training."),
    )
