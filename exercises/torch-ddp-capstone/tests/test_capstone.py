"""Hidden tests for the DDP capstone: two real ranks, real DDP over gloo (runner.vdev.ddp).

The ranks run once per grading job (the first test that needs them); every test then reads the same results
and checks one part of the conversion. The judge rebuilds the model from what the ranks report and measures
its validation accuracy itself.
"""

import math
import re

import pytest
import torch
from probes import BATCH, EPOCHS, LR, N_TRAIN, N_VAL, PREFIX, TARGET, build_model, make_data

WORLD = 2
PER_RANK = N_TRAIN // WORLD
SCALED_LR = LR * WORLD  # per-GPU batch kept at BATCH: the global batch is WORLD times larger
_cache: dict = {}


def _run(probe):
    if "run" not in _cache:
        try:
            _cache["run"] = probe("run", world_size=WORLD, timeout_s=40.0)
        except Exception as exc:
            _cache["run"] = exc
    run = _cache["run"]
    if isinstance(run, Exception):
        pytest.fail(f"running train on {WORLD} ranks failed before any rank reported: {type(run).__name__}: {run}")
    return run


def _clip(text, limit):
    """Cut text at a word boundary before ``limit`` characters."""
    text = " ".join(str(text).split())
    if len(text) <= limit:
        return text
    return text[:limit].rsplit(" ", 1)[0].rstrip(" .,:;") + " ..."


def _describe(r):
    if r["timed_out"]:
        return (
            f"rank {r['rank']} did not finish within 40 s. A rank waits forever when another never joins a collective "
            "it is in: every rank must run the same number of steps and call every all_reduce/barrier, including the "
            "ones for the metrics and around the checkpoint (do not put a collective inside `if rank == 0:`)"
        )
    if r["error"]:
        e = r["error"]
        lines = re.findall(r'submission\.py", line (\d+)', e.get("traceback") or "")
        where = f" (your code, line {lines[-1]})" if lines else ""
        return f"rank {r['rank']} raised {e['type']}: {_clip(e['message'], 400)}{where}"
    if r["destroyed"] is None:
        return f"rank {r['rank']} exited without returning a result (exit code {r['exit_code']})"
    return f"rank {r['rank']} finished"


def _ranks(probe):
    ranks = _run(probe)["ranks"]
    bad = [r for r in ranks if r["timed_out"] or r["error"] or r["destroyed"] is None]
    if bad:
        pytest.fail("; ".join(_describe(r) for r in bad))
    return ranks


def _get(r, name):
    entry = r["state"][PREFIX + name]
    return entry["data"]


def _samplers(r):
    """This rank's iterations of a DistributedSampler over the training set: [seed, epoch, num_replicas, rank,
    shuffle, training batches before it], in order."""
    entry = r["state"][PREFIX + "samplers"]
    rows = [entry["data"][i:i + 6] for i in range(0, len(entry["data"]), 6)]
    return [row for row in rows if row != [-1] * 6]


def _params(r):
    """The final parameters of the model this rank wrapped in DDP, as a plain state dict of float64 tensors."""
    state = {k[len(PREFIX) + 6:]: v for k, v in r["state"].items() if k.startswith(PREFIX + "param.")}
    if not state:
        pytest.fail(
            f"rank {r['rank']} never wrapped a model in DistributedDataParallel: each rank would train alone and nothing "
            "would keep the copies in sync. After init_process_group, wrap the model: model = DistributedDataParallel(model)."
        )
    return {k: torch.tensor(v["data"], dtype=torch.float64).reshape(v["shape"]) for k, v in state.items()}


def _accuracy(state):
    model = build_model()  # float32, like the ranks: the float64 copies of float32 values convert back exactly
    model.load_state_dict({k: v.float() for k, v in state.items()})
    x, y = make_data()[1].tensors
    with torch.no_grad():
        return float((model(x).argmax(dim=1) == y).double().mean())


def _sizes(r):
    """The sizes of this rank's training batches: DDP forwards that a backward pass reached."""
    sizes = _get(r, "sizes")
    if sizes == [0]:
        pytest.fail(
            f"no batch went through DistributedDataParallel on rank {r['rank']}: no forward of the DDP-wrapped model "
            "was followed by a backward pass. Train the wrapped model itself (loss = loss_fn(model(x), y); "
            "loss.backward() with model = DistributedDataParallel(...)), not model.module: only the wrapper averages "
            "the gradients across the ranks."
        )
    return sizes


def _epochs(r):
    """This rank's epochs as (first, end) ranges of training batches, and how they were counted.

    An epoch starts where the code starts a pass over its data (a DataLoader or DistributedSampler iteration, a
    set_epoch call). Code that loops over its own tensors marks no pass: its epochs are counted by samples, one
    per PER_RANK samples (this rank's share of the training set).
    """
    sizes = _sizes(r)
    starts = sorted({s for s in _get(r, "starts") if 0 <= s < len(sizes)} | {0})
    if len(starts) > 1:
        return list(zip(starts, starts[1:] + [len(sizes)])), "passes"
    epochs, first, seen = [], 0, 0
    for i, size in enumerate(sizes):
        seen += size
        if seen >= PER_RANK:
            epochs.append((first, i + 1))
            first, seen = i + 1, 0
    if first < len(sizes):
        epochs.append((first, len(sizes)))
    return epochs, "samples"


def _epoch_indices(r, epochs, e):
    """The dataset indices of the samples this rank trained on in epoch ``e`` (counted from 0)."""
    sizes, indices = _get(r, "sizes"), _get(r, "indices")
    first, end = epochs[e]
    return indices[sum(sizes[:first]):sum(sizes[:end])]


def _scaled(r):
    lrs = _get(r, "lrs")
    return lrs != [-1.0] and math.isclose(lrs[-1], SCALED_LR, rel_tol=1e-6)


def test_every_rank_finishes(probe):
    ranks = _ranks(probe)
    for r in ranks:
        if not r["destroyed"]:
            pytest.fail(
                f"rank {r['rank']} returned with the process group still initialised: call dist.destroy_process_group() "
                "at the end of train, on every rank."
            )
        got = r["state"].get("val_accuracy")
        if got is None or got["shape"] not in ([], [1]):
            pytest.fail(
                f"rank {r['rank']} returned keys {sorted(k for k in r['state'] if not k.startswith(PREFIX))}; expected "
                "{'val_accuracy': a 0-dim tensor}."
            )


def test_ranks_agree(probe):
    ranks = _ranks(probe)
    p0, p1 = (_params(r) for r in ranks)
    diff = max(float((p0[k] - p1[k]).abs().max()) for k in p0)
    if diff >= 1e-5:
        pytest.fail(
            f"rank 0 and rank 1 end with different parameters (max difference {diff:.3g}). DDP averages the gradients "
            "across ranks in backward, so every rank takes the same step and the copies stay identical: train the "
            "DistributedDataParallel-wrapped model, with an optimizer over its parameters."
        )


def _overlap_cause(ranks, firsts):
    """Name why the ranks' first epochs overlap, from what their samplers were."""
    samplers = {r["rank"]: _samplers(r) for r in ranks}
    first = {rank: rows[0] for rank, rows in samplers.items() if rows}
    seeds = {rank: row[0] for rank, row in first.items()}
    if len(first) == WORLD and len(set(seeds.values())) > 1:
        said = " and ".join(f"seed={seed} on rank {rank}" for rank, seed in sorted(seeds.items()))
        return (
            f"Your DistributedSamplers have {said}. Each rank's sampler shuffles the whole dataset with its seed (plus "
            "the epoch) and then takes its own slice of that order, so the slices are disjoint only when every rank "
            "shuffles with the same seed: pass the same seed on every rank (or leave the default, 0)."
        )
    for rank, row in sorted(first.items()):
        if row[2] != WORLD or row[3] != rank:
            return (
                f"On rank {rank} the DistributedSampler has num_replicas={row[2]} and rank={row[3]}: give it "
                "num_replicas=world_size and rank=rank (or leave both out: they then come from the process group)."
            )
    if not first:
        whole = all(len(f) == N_TRAIN for f in firsts.values())
        return (
            "No DistributedSampler was iterated over the training set. Load the data through "
            "DistributedSampler(train_set, num_replicas=world_size, rank=rank) (and no shuffle=True on the DataLoader "
            "itself)" + (": without it every rank trains on everything and two GPUs do the same work twice."
                         if whole else ", or give each rank a disjoint share of one common order by hand.")
        )
    return "Give every rank the same DistributedSampler(train_set, num_replicas=world_size, rank=rank, seed=...)."


def test_data_sharded_without_overlap(probe):
    ranks = _ranks(probe)
    firsts = {}
    for r in ranks:
        epochs, _ = _epochs(r)
        first = _epoch_indices(r, epochs, 0)
        if -1 in first:
            pytest.fail(
                f"rank {r['rank']} trained on samples that are not in make_data()'s training set. Every rank must build "
                "the same data with the script's make_data(); the sampler then picks each rank's share."
            )
        firsts[r["rank"]] = first
    a, b = firsts[0], firsts[1]
    shared = set(a) & set(b)
    if shared or not len(a) == len(b) == len(set(a)) == PER_RANK:
        pytest.fail(
            f"in the first epoch rank 0 trained on {len(a)} samples and rank 1 on {len(b)}, {len(shared)} of them the "
            f"same (e.g. indices {sorted(shared)[:8]}); each of the {WORLD} ranks should train on its own {PER_RANK} of "
            f"the {N_TRAIN}, no sample on both. " + _overlap_cause(ranks, firsts)
        )


def test_reshuffles_every_epoch(probe):
    for r in _ranks(probe):
        epochs, _ = _epochs(r)
        if len(epochs) < 2:
            pytest.fail(f"rank {r['rank']} trained for a single epoch; keep the script's {EPOCHS}.")
        first, second = _epoch_indices(r, epochs, 0), _epoch_indices(r, epochs, 1)
        if first != second:
            continue
        samplers = _samplers(r)
        if samplers and not samplers[0][4]:
            cause = ("Its DistributedSampler was made with shuffle=False, which keeps one order for good: leave "
                     "shuffle=True (the default) and call sampler.set_epoch(epoch) at the start of every epoch.")
        elif samplers and len({row[1] for row in samplers}) == 1:
            cause = ("DistributedSampler shuffles with a seed plus the epoch number it was given: call "
                     "sampler.set_epoch(epoch) at the start of every epoch, or every epoch repeats the first shuffle and "
                     "each rank keeps the same half of the data for the whole run.")
        else:
            cause = ("Shuffle anew every epoch, the same way on every rank: a DistributedSampler with "
                     "sampler.set_epoch(epoch) at the start of every epoch.")
        pytest.fail(
            f"rank {r['rank']} trained on exactly the same samples in the same order in epoch 1 and epoch 2 "
            f"(starting {first[:6]}). {cause}"
        )


def test_batch_and_lr_scaled(probe):
    for r in _ranks(probe):
        sizes, lrs = _sizes(r), _get(r, "lrs")
        if max(sizes) > BATCH:
            pytest.fail(
                f"rank {r['rank']} trained on batches of up to {max(sizes)} samples. Keep the script's {BATCH} per GPU: "
                f"every rank runs its own batch, so one step already learns from {BATCH} x {WORLD} = {BATCH * WORLD} "
                f"samples, and {max(sizes)} per rank makes the global batch {max(sizes) * WORLD}. Do not multiply the "
                "per-rank batch by the world size: DDP does that for you."
            )
        if max(sizes) < BATCH:
            pytest.fail(
                f"rank {r['rank']} trained on batches of up to {max(sizes)} samples. Keep the script's {BATCH} per GPU, "
                f"so that one step takes a global batch of {BATCH} x {WORLD} = {BATCH * WORLD}. Do not divide the batch "
                "by the world size: the point of more GPUs is to take more samples per step."
            )
        if lrs == [-1.0]:
            pytest.fail(f"rank {r['rank']} never called optimizer.step().")
        last = lrs[-1]
        if not math.isclose(last, SCALED_LR, rel_tol=1e-6):
            pytest.fail(
                f"rank {r['rank']}'s optimizer stepped with learning rate {last:g}; the script's {LR} was tuned for "
                f"{BATCH} samples per step. With the global batch {BATCH * WORLD}, the linear scaling rule gives "
                f"{LR} x {BATCH * WORLD} / {BATCH} = {SCALED_LR:g}"
                + (": each epoch now has half as many steps, and with the old rate the model learns too little in "
                   f"{EPOCHS} epochs." if math.isclose(last, LR) else ".")
            )


def test_reaches_target_accuracy(probe):
    ranks = _ranks(probe)
    r0 = ranks[0]
    epochs, counted = _epochs(r0)
    sizes = _get(r0, "sizes")
    n, steps = len(epochs), len(sizes)
    if counted == "passes":
        trained = f"rank 0 trained for {n} epochs ({n} passes over its data, {steps} steps)"
    else:
        trained = (f"rank 0 trained on {sum(sizes)} samples ({steps} steps), {n} times its {PER_RANK}-sample share "
                   "of the training set")
    if n > EPOCHS:
        pytest.fail(
            f"{trained}; the budget is the script's {EPOCHS} epochs, each one pass over this rank's share (a "
            f"DistributedSampler gives each rank 1/world_size of the data). "
            + ("With the scaled learning rate the model reaches the target within them: keep the script's "
               f"{EPOCHS} epochs." if _scaled(r0) else
               f"Instead of training longer, scale the learning rate with the global batch ({LR} -> {SCALED_LR:g}): "
               f"with {WORLD} ranks an epoch has {WORLD} times fewer steps, and the larger rate makes up for them.")
        )
    acc = _accuracy(_params(r0))
    if acc < TARGET:
        if n < EPOCHS:
            why = f"It trained fewer epochs than the script: keep all {EPOCHS}."
        elif not _scaled(r0):
            why = (f"With {WORLD} ranks an epoch has {WORLD} times fewer steps: scale the learning rate with the global "
                   f"batch ({LR} -> {SCALED_LR:g}) so the {EPOCHS} epochs still suffice.")
        elif max(sizes) != BATCH:
            why = (f"It trained on batches of up to {max(sizes)} samples per rank: keep the script's {BATCH} per GPU, "
                   f"with the rate scaled for that global batch of {BATCH * WORLD}.")
        else:
            why = ("The epochs, the batch and the scaled rate look right; check what else differs from the script: the "
                   "starting weights (torch.manual_seed(0), then build_model()), the loss, and each rank's share.")
        pytest.fail(
            f"{trained}, and the final model classifies {acc:.1%} of the {N_VAL} validation samples correctly; the "
            f"single-device script reaches about 92% in {EPOCHS} epochs, and the DDP version must reach {TARGET:.0%} "
            f"in the same {EPOCHS}. {why}"
        )


def test_reported_accuracy_is_global(probe):
    ranks = _ranks(probe)
    acc = _accuracy(_params(ranks[0]))
    for r in ranks:
        got = float(r["state"]["val_accuracy"]["data"][0])
        if abs(got - acc) >= 1e-6:
            pytest.fail(
                f"rank {r['rank']} reported val_accuracy {got:.4f}, but the final model classifies {acc:.4f} of all "
                f"{N_VAL} validation samples correctly. If each rank evaluates only its own shard, its accuracy is a "
                "local number: sum the correct predictions and the sample counts over the ranks with "
                "dist.all_reduce(tensor, op=dist.ReduceOp.SUM) and divide, so that every rank reports the accuracy of the "
                "whole validation set."
            )


def test_only_rank0_writes(probe):
    ranks = _ranks(probe)
    saves = {r["rank"]: int(_get(r, "saves")[0]) for r in ranks}
    if saves[0] < 1:
        pytest.fail(
            f"rank 0 never called torch.save; save the checkpoint with torch.save(state_dict, checkpoint_path) "
            f"from rank 0 (saves per rank: {saves})."
        )
    if any(n for rank, n in saves.items() if rank != 0):
        pytest.fail(
            f"torch.save was called on every rank (saves per rank: {saves}). The copies are identical, so one file is "
            "enough: with several ranks writing the same path at once, the file can end up mixed or half-written, and "
            "N GPUs write N times the data. Save only `if rank == 0:` (then dist.barrier() if the others must wait for it)."
        )


def test_checkpoint_loads_into_plain_model(probe):
    run = _run(probe)
    ckpt = run["checkpoint"]
    if not ckpt["exists"]:
        pytest.fail("no checkpoint at checkpoint_path after training: save rank 0's model with torch.save.")
    if ckpt["pickled"]:
        what = "the DistributedDataParallel wrapper" if ckpt["pickled"] == "DistributedDataParallel" else "a model"
        pytest.fail(
            f"the checkpoint holds a whole pickled {ckpt['pickled']} object ({what}), not a state_dict: "
            "torch.load refuses to unpickle such an object by default (weights_only=True since PyTorch 2.6), and a "
            "pickled model only loads where its class's code is importable. Save the parameters instead: "
            "torch.save(model.module.state_dict(), checkpoint_path), which loads into a plain build_model() with "
            "load_state_dict."
        )
    if ckpt["load_error"]:
        keys = ckpt["keys"]
        hint = ""
        if any(k.startswith("module.") for k in keys):
            hint = (
                " Its keys start with 'module.': that is the DistributedDataParallel wrapper's state_dict (DDP keeps "
                "your model as .module). Save model.module.state_dict(), so the file loads into a plain model "
                "without DDP, for evaluation or inference on one device."
            )
        pytest.fail(
            f"loading the checkpoint into a plain build_model() failed: {_clip(ckpt['load_error'], 300).rstrip(' .')}.{hint} "
            f"(keys: {keys[:4]})"
        )
    if not ckpt["state"]:
        pytest.fail(
            f"the checkpoint holds a {ckpt['type']}, not a state_dict: save torch.save(model.module.state_dict(), "
            "checkpoint_path)."
        )
    ranks = _ranks(probe)
    final = _params(ranks[0])
    state = {k: torch.tensor(v, dtype=torch.float64).reshape(final[k].shape) for k, v in ckpt["state"].items()}
    diff = max(float((state[k] - final[k]).abs().max()) for k in final)
    if diff >= 1e-6:
        pytest.fail(
            f"the checkpoint's parameters differ from the trained model's by up to {diff:.3g}; save after the last epoch."
        )
