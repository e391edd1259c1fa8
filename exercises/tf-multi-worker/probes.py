"""Probes for tf-multi-worker: run the learner's train_worker(workers, index, model_dir) in two real worker
processes on loopback (runner.vdev.tf_workers) and report, as data, what each worker did.

Each worker notes, as it goes, into a file of its own (so a worker that hangs and is killed still tells):
- the TF_CONFIG it had when it created a MultiWorkerMirroredStrategy, and the strategy's replica count and task id;
- each call of experimental_distribute_dataset (with the dataset's auto-shard policy) or
  distribute_datasets_from_function (with the InputContext each dataset_fn call got);
- every distributed batch it took in eager Python (a `for batch in dist_dataset:` loop): for each of its local
  replicas, the ids of the examples in it (found by their feature rows); batches taken inside a tf.function are
  not seen, and the tests then judge by the weights alone;
- every path it saved to (Keras save / save_weights / export, tf.train.Checkpoint save / write, tf.saved_model
  save, and Python's open() for writing), and its deletions (shutil.rmtree, os.remove, os.rmdir): every one of
  model_dir, of something in it or of a folder that holds it, the first MAX_STEP_NOTES of other paths;
- the end of each such pass (the iterator ran out);
- the step: each Keras optimizer made (its type, its learning rate, whether a strategy's scope was open), and
  for each optimizer apply (apply_gradients too) whether it ran in a replica context of the strategy (inside
  strategy.run), in the strategy's cross-replica context or outside every strategy, with the shapes of the variables
  it updated and whether they
  were distributed (made under strategy.scope()); every replica-context all-reduce outside the optimizer (the
  shapes of what it summed); the shape of every per-example loss given to tf.nn.compute_average_loss and its
  global_batch_size; every strategy.reduce that the learner's own code called eagerly (outside every tf.function:
  inside one, autograph's frames make the call, and TensorFlow's own eager calls are left out too); every
  Dataset.shuffle and Dataset.shard. These are noted when they run, so once per trace
  inside a tf.function (at most MAX_STEP_NOTES of each kind).
The worker returns its final weights. After both are done, one more forked process loads model_dir/model.keras.
Observations can be forged by a learner who patches this file, like every probe's; the weights cannot be without
training right. TensorFlow is imported inside the functions so that the judge can import this file cheaply.
"""

import collections
import itertools
import json
import os
import sys
import tempfile
import threading

import numpy as np

N_EXAMPLES, FEATURES = 64, 4
PER_REPLICA_BATCH, LEARNING_RATE, EPOCHS = 8, 0.05, 3
WORKERS = 2
TRUE_KERNEL = np.array([1.0, -2.0, 0.5, 3.0], dtype="float32")
RUN_TIMEOUT_S, GRACE_S, LOAD_TIMEOUT_S = 150.0, 10.0, 60.0
MODEL_FILE = "model.keras"
MAX_BATCH_NOTES = 200
# audit event: the call it stands for
DELETES = {"shutil.rmtree": "shutil.rmtree", "os.remove": "os.remove (or os.unlink)", "os.rmdir": "os.rmdir"}
MAX_STEP_NOTES = 20  # of each kind of step note (apply, all_reduce, average_loss), and of other deletions


def data():
    """The starter's make_dataset(), as NumPy arrays."""
    x = np.random.RandomState(0).randn(N_EXAMPLES, FEATURES).astype("float32")
    y = (x @ TRUE_KERNEL + 0.25)[:, None].astype("float32")
    return x, y


class _Notes:
    """Append one JSON line per event to this worker's notes file, flushed at once."""

    def __init__(self, path):
        self.fh = open(path, "a", encoding="utf-8")  # noqa: SIM115 - kept open for the worker's life
        self.batches = 0
        self.counts = collections.Counter()

    def capped(self, kind, **fields):
        """Note `kind` unless MAX_STEP_NOTES of it were noted already (an eager loop notes every step)."""
        self.counts[kind] += 1
        if self.counts[kind] <= MAX_STEP_NOTES:
            self(kind, **fields)

    def __call__(self, kind, **fields):
        self.fh.write(json.dumps({"kind": kind, **fields}, default=str) + "\n")
        self.fh.flush()


def _ids_of(rows, index_of):
    return [index_of.get(tuple(np.round(row, 5).tolist()), -1) for row in np.asarray(rows).reshape(len(rows), -1)]


def _install(note, model_dir):
    """Patch the strategy, the distributed iterators and the savers of this worker so that they note what they do."""
    import keras
    import tensorflow as tf
    from keras.src.optimizers import base_optimizer
    from tensorflow.python.distribute import distribute_lib, input_lib

    mwms = tf.distribute.MultiWorkerMirroredStrategy
    original_init = mwms.__init__

    def init(self, *args, **kwargs):
        note("strategy", tf_config=os.environ.get("TF_CONFIG"))
        original_init(self, *args, **kwargs)
        resolver = self.cluster_resolver
        note("cluster", replicas=int(self.num_replicas_in_sync), task_type=resolver.task_type, task_id=resolver.task_id)

    mwms.__init__ = init

    original_eds = tf.distribute.Strategy.experimental_distribute_dataset
    original_dff = tf.distribute.Strategy.distribute_datasets_from_function

    def eds(self, dataset, *args, **kwargs):
        try:
            policy = dataset.options().experimental_distribute.auto_shard_policy.name
        except Exception:
            policy = None
        note("distribute", api="experimental_distribute_dataset", policy=policy)
        return original_eds(self, dataset, *args, **kwargs)

    def dff(self, dataset_fn, *args, **kwargs):
        note("distribute", api="distribute_datasets_from_function")

        def fn(context):
            note("input_context", pipelines=context.num_input_pipelines, pipeline_id=context.input_pipeline_id)
            return dataset_fn(context)

        return original_dff(self, fn if callable(dataset_fn) else dataset_fn, *args, **kwargs)

    tf.distribute.Strategy.experimental_distribute_dataset = eds
    tf.distribute.Strategy.distribute_datasets_from_function = dff

    x, _ = data()
    index_of = {tuple(np.round(row, 5).tolist()): i for i, row in enumerate(x)}
    original_next = input_lib.DistributedIteratorBase.get_next

    passes = itertools.count()

    def get_next(self, *args, **kwargs):
        eager = tf.executing_eagerly()
        if eager and "_probe_pass" not in vars(self):  # a new iterator: a new pass over the data (ids can be reused)
            self._probe_pass = next(passes)
        try:
            element = original_next(self, *args, **kwargs)
        except (tf.errors.OutOfRangeError, StopIteration):
            if eager:
                note("end", iterator=self._probe_pass)
            raise
        if eager and note.batches < MAX_BATCH_NOTES:
            note.batches += 1
            try:
                first = tf.nest.flatten(element, expand_composites=False)[0]
                parts = self._strategy.experimental_local_results(first)
                note("batch", iterator=self._probe_pass, replicas=[_ids_of(p.numpy(), index_of) for p in parts])
            except Exception as exc:
                note("batch", iterator=self._probe_pass, unreadable=f"{type(exc).__name__}: {exc}"[:200])
        return element

    input_lib.DistributedIteratorBase.get_next = get_next

    def saver(owner, name, api):
        original = getattr(owner, name)

        def save(*args, **kwargs):
            path = next((a for a in args if isinstance(a, (str, os.PathLike))), None)
            path = kwargs.get("filepath", kwargs.get("file_prefix", kwargs.get("export_dir", path)))
            if path is not None:
                note("save", api=api, path=os.path.realpath(os.fspath(path)))
            return original(*args, **kwargs)

        setattr(owner, name, save)

    in_optimizer = threading.local()  # the optimizer's own all-reduce of the gradients is not the learner's
    original_opt_init = base_optimizer.BaseOptimizer.__init__
    original_apply = base_optimizer.BaseOptimizer.apply
    original_all_reduce = distribute_lib.ReplicaContextBase.all_reduce
    original_average = tf.nn.compute_average_loss

    def opt_init(self, *args, **kwargs):
        original_opt_init(self, *args, **kwargs)
        try:
            rate = round(float(np.asarray(self.learning_rate)), 8)
        except Exception:  # a schedule, or made inside a tf.function
            rate = None
        note("optimizer", type=type(self).__name__, learning_rate=rate, in_scope=bool(tf.distribute.has_strategy()))

    def apply(self, grads, trainable_variables=None):
        if getattr(in_optimizer, "depth", 0) == 0:
            try:
                context = tf.distribute.get_replica_context()
                where = "cross-replica" if context is None else "replica" if tf.distribute.has_strategy() else "none"
                variables = list(trainable_variables if trainable_variables is not None else self._trainable_variables)
                note.capped(
                    "apply",
                    where=where,
                    shapes=[list(v.shape) for v in variables],
                    distributed=[
                        isinstance(getattr(v, "value", v), tf.distribute.DistributedValues) for v in variables
                    ],
                )
            except Exception as exc:
                note.capped("apply", unreadable=f"{type(exc).__name__}: {exc}"[:200])
        in_optimizer.depth = getattr(in_optimizer, "depth", 0) + 1
        try:
            return original_apply(self, grads, trainable_variables)
        finally:
            in_optimizer.depth -= 1

    def all_reduce(self, reduce_op, value, options=None):
        if getattr(in_optimizer, "depth", 0) == 0:
            try:
                shapes = [list(t.shape) for t in tf.nest.flatten(value)]
            except Exception:
                shapes = None
            note.capped("all_reduce", op=str(getattr(reduce_op, "name", reduce_op)), shapes=shapes)
        return original_all_reduce(self, reduce_op, value, options)

    def average(per_example_loss, *args, **kwargs):
        try:
            shape = tf.convert_to_tensor(per_example_loss).shape.as_list()
        except Exception:
            shape = None
        size = kwargs.get("global_batch_size", args[1] if len(args) > 1 else None)
        note.capped("average_loss", shape=shape, global_batch_size=size if isinstance(size, int) else None)
        return original_average(per_example_loss, *args, **kwargs)

    base_optimizer.BaseOptimizer.__init__ = opt_init
    base_optimizer.BaseOptimizer.apply = apply
    distribute_lib.ReplicaContextBase.all_reduce = all_reduce
    original_reduce = distribute_lib.StrategyBase.reduce

    def strategy_reduce(self, *args, **kwargs):
        caller = sys._getframe(1).f_code.co_filename
        if tf.executing_eagerly() and "site-packages" not in caller and "dist-packages" not in caller:
            note.capped("reduce", eager=True)  # the learner's own eager call, not TensorFlow's
        return original_reduce(self, *args, **kwargs)

    distribute_lib.StrategyBase.reduce = strategy_reduce
    tf.nn.compute_average_loss = average

    original_shuffle, original_shard = tf.data.Dataset.shuffle, tf.data.Dataset.shard

    def shuffle(self, *args, **kwargs):
        note("shuffle")
        return original_shuffle(self, *args, **kwargs)

    def shard(self, *args, **kwargs):
        named = {**dict(zip(("num_shards", "index"), args[:2], strict=False)), **kwargs}
        note("shard", **{k: v if isinstance(v := named.get(k), int) else None for k in ("num_shards", "index")})
        return original_shard(self, *args, **kwargs)

    tf.data.Dataset.shuffle = shuffle
    tf.data.Dataset.shard = shard

    saver(keras.Model, "save", "model.save")
    saver(keras.Model, "save_weights", "model.save_weights")
    saver(keras.Model, "export", "model.export")
    saver(keras.saving, "save_model", "keras.saving.save_model")
    saver(tf.train.Checkpoint, "save", "tf.train.Checkpoint.save")
    saver(tf.train.Checkpoint, "write", "tf.train.Checkpoint.write")
    saver(tf.saved_model, "save", "tf.saved_model.save")

    inside = os.path.realpath(model_dir) + os.sep
    writing = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC

    top = os.path.realpath(model_dir)

    def audit(event, args):
        # Python-level writes into model_dir (TensorFlow's own writes go through its C++ file system: the savers
        # above see those). open() gives a mode string, os.open flags.
        if event in DELETES and isinstance(args[0], (str, bytes, os.PathLike)) and (len(args) < 2 or args[1] is None):
            # A deletion (an absolute path or one relative to the working folder: shutil.rmtree's own removals
            # inside the tree, relative to a folder's descriptor, are left out): every one of model_dir, of
            # something in it or of a folder that holds it, the first MAX_STEP_NOTES of any other path.
            path = os.path.realpath(os.fsdecode(args[0]))
            if path == top or path.startswith(inside) or inside.startswith(path.rstrip(os.sep) + os.sep):
                note("delete", api=DELETES[event], path=path)
            else:  # elsewhere (a temporary folder of its own): the first few
                note.capped("delete", api=DELETES[event], path=path)
            return
        if event != "open" or not isinstance(args[0], (str, bytes)):
            return
        mode, flags = args[1], args[2]
        if (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            mode is None and isinstance(flags, int) and flags & writing
        ):
            path = os.path.realpath(os.fsdecode(args[0]))
            if path.startswith(inside):
                note("save", api="open", path=path)

    sys.addaudithook(audit)


def _weights(model):
    out = {"type": type(model).__name__}
    if hasattr(model, "get_weights"):
        for i, w in enumerate(model.get_weights()):
            out[f"w{i}"] = np.asarray(w)
    return out


def _read_notes(path):
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.endswith("\n")]


def _files(folder):
    return sorted(os.path.relpath(os.path.join(root, f), folder) for root, _, names in os.walk(folder) for f in names)


def run(submission):
    """Train with the learner's train_worker in two worker processes; load what the chief saved."""
    from runner.vdev import tf_workers

    root = tempfile.mkdtemp()
    model_dir = os.path.join(root, "model")
    os.makedirs(model_dir)

    def work(workers, index):
        note = _Notes(os.path.join(root, f"notes-{index}.jsonl"))
        note("given", workers=workers, index=index)
        _install(note, model_dir)
        model = submission.train_worker(workers, index, model_dir)
        note("returned")
        return _weights(model)

    results = tf_workers.run(work, WORKERS, RUN_TIMEOUT_S, grace_s=GRACE_S)
    files = _files(model_dir)
    loaded = None
    if MODEL_FILE in files:

        def load(workers, index):
            import keras

            return _weights(keras.models.load_model(os.path.join(model_dir, MODEL_FILE), compile=False))

        loaded = tf_workers.run(load, 1, LOAD_TIMEOUT_S)[0].plain()
    return {
        "model_dir": os.path.realpath(model_dir),
        "workers": [r.plain() for r in results],
        "notes": [_read_notes(os.path.join(root, f"notes-{i}.jsonl")) for i in range(WORKERS)],
        "files": files,
        "loaded": loaded,
    }
