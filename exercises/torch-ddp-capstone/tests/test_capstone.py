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
from runner import feedback

WORLD = 2
PER_RANK = N_TRAIN // WORLD
SCALED_LR = LR * WORLD  # per-GPU batch kept at BATCH: the global batch is WORLD times larger
TIMEOUT_S = 40.0
_cache: dict = {}


def _run(probe):
    if "run" not in _cache:
        try:
            _cache["run"] = probe("run", world_size=WORLD, timeout_s=TIMEOUT_S)
        except Exception as exc:
            _cache["run"] = exc
    run = _cache["run"]
    if isinstance(run, Exception):
        feedback.fail(feedback.raised(f"running train on {WORLD} ranks", type(run).__name__, str(run)))
    return run


def _calls(run, rank):
    """This rank's logged torch.distributed calls: {"started": {name: n}, "ended": {name: n}, "last": line}."""
    calls = run.get("calls") or []
    return calls[rank] if rank < len(calls) else {"started": {}, "ended": {}, "last": ""}


def _started(calls, name):
    return calls["started"].get(name, 0)


def _stuck_in(calls):
    """The torch.distributed call this rank started and had not finished when it stopped, or None."""
    last = calls["last"]
    return last[len("start "):] if last.startswith("start ") else None


def _line(r):
    found = re.findall(r'submission\.py", line (\d+)', (r["error"] or {}).get("traceback") or "")
    return found[-1] if found else None


def _who(ranks, world):
    """ "Every rank" or "Rank 0 and rank 1"-style subject for a sentence."""
    if len(ranks) == world:
        return "Every rank"
    return " and ".join(f"rank {k}" for k in ranks).capitalize()


def _hung(run, stuck, done):
    """Explain ranks stopped at the time limit while every other rank returned, from their dist.* calls."""
    parts = []
    finished = " and ".join(f"rank {o['rank']}" for o in done)
    for r in stuck:
        lines = _calls(run, r["rank"])
        name = _stuck_in(lines)
        counts = {o["rank"]: _started(_calls(run, o["rank"]), name) for o in done} if name else {}
        others = ", ".join(f"rank {k} {n} times" for k, n in counts.items())
        if name and max(counts.values()) >= _started(lines, name):
            parts.append(
                f"Rank {r['rank']} did not finish within {TIMEOUT_S:g} s: it was stopped inside dist.{name}(), its "
                f"call number {_started(lines, name)} to it, while {finished} returned after calling dist.{name} as "
                f"often or more ({others}): the ranks' collectives did not line up. Every rank must call the same "
                "collectives, in the same order, the same number of times."
            )
        elif name:
            parts.append(
                f"Rank {r['rank']} did not finish within {TIMEOUT_S:g} s: it was stopped inside dist.{name}(), its "
                f"call number {_started(lines, name)} to it, while {finished} returned after calling dist.{name} "
                f"fewer times ({others}). A collective waits until every rank calls it: call it on every rank, the "
                "same number of times (a collective inside `if rank == 0:` runs on rank 0 alone)."
            )
        else:
            parts.append(
                f"Rank {r['rank']} did not finish within {TIMEOUT_S:g} s, while {finished} returned; it was inside "
                "none of your dist.* calls when it was stopped. Candidates: DDP's gradient sync in a backward pass "
                "that the other ranks did not run (more training steps on this rank than on the others), or a loop "
                "that never ends on this rank."
            )
    return " ".join(parts)


def _all_hung(run, stuck):
    """Explain a run where no rank finished in time, from where each rank was when it was stopped."""
    where = {r["rank"]: _stuck_in(_calls(run, r["rank"])) for r in stuck}
    said = "; ".join(
        f"rank {k} inside dist.{name}() (its call number {_started(_calls(run, k), name)} to it)" if name
        else f"rank {k} in none of your dist.* calls" for k, name in where.items())
    head = f"No rank finished within {TIMEOUT_S:g} s. When they were stopped: {said}."
    if all(where.values()) and len({(n, _started(_calls(run, k), n)) for k, n in where.items()}) > 1:
        return (f"{head} The ranks waited in different collectives: every rank must call the same collectives, in "
                "the same order, the same number of times (a collective inside `if rank == 0:` runs on rank 0 "
                "alone).")
    return (f"{head} Candidates: DDP's gradient sync in backward passes that the ranks did not run the same number "
            "of times (different numbers of training steps), a collective of yours that not every rank reached, or "
            "training that takes far longer than the script's (a loop that never ends).")


def _unmatched(run, ranks):
    """A sentence about a collective one rank was inside when the run broke and the other ranks had called fewer
    times (so it had no partner there), or None."""
    for r in ranks:
        lines = _calls(run, r["rank"])
        name = _stuck_in(lines)
        if not name or name in ("init_process_group", "destroy_process_group"):
            continue
        n = _started(lines, name)
        others = {o["rank"]: _started(_calls(run, o["rank"]), name) for o in ranks if o is not r}
        if others and all(m < n for m in others.values()):
            told = ", ".join(f"rank {k} {m} time{'s' if m != 1 else ''}" for k, m in others.items())
            return (
                f"When the run broke, rank {r['rank']} was inside dist.{name}(), its call number {n} to it, which the "
                f"other ranks had called fewer times ({told}): that call had no partner on them, and the ranks' "
                "communication broke down. A collective waits until every rank calls it: call it on every rank, the "
                "same number of times, and print on rank 0 only (a collective inside `if rank == 0:` runs on rank 0 "
                "alone)."
            )
    return None


def _failed_ranks(run):
    """Fail the test, explaining the ranks that did not return (the first failure named first)."""
    ranks = run["ranks"]
    stuck = [r for r in ranks if r["timed_out"]]
    done = [r for r in ranks if not (r["timed_out"] or r["error"] or r["destroyed"] is None)]
    if stuck and done and len(stuck) + len(done) == len(ranks):
        feedback.fail(_hung(run, stuck, done))
    if len(stuck) == len(ranks):
        feedback.fail(_all_hung(run, stuck))
    errors = {(str(r["error"]["type"]), str(r["error"]["message"])) for r in ranks if r["error"]}
    if len(errors) == 1 and all(r["error"] for r in ranks):
        told = feedback.raised("train on every rank", *errors.pop())  # the same failure, told once
    else:
        told = feedback.ranks(ranks, what="train", timeout_s=TIMEOUT_S)
    extra = [note] if (note := _unmatched(run, ranks)) else []
    lines = {r["rank"]: _line(r) for r in ranks if r["error"]}
    known = {n for n in lines.values() if n}
    if len(known) == 1 and all(lines.values()):
        extra.append(f"That was line {known.pop()} of your code.")
    elif known:
        extra.append("Where: " + ", ".join(f"rank {k} at line {n} of your code" for k, n in lines.items() if n) + ".")
    destroyed_first = []
    for r in ranks:
        e = r["error"] or {}
        found = feedback.classify(str(e.get("type", "")), str(e.get("message", "")))
        destroyed = _calls(run, r["rank"])["ended"].get("destroy_process_group")
        if found and found[0].id == "process_group.missing" and destroyed:
            destroyed_first.append(r["rank"])
    if destroyed_first:
        extra.append(
            f"{_who(destroyed_first, len(ranks))} had already called dist.destroy_process_group() before that: destroy "
            "the group only at the very end of train, after the last collective (the metrics' all_reduce, any barrier)."
        )
    feedback.fail(" ".join([told.message, *extra]), details=told.details)


def _ranks(probe):
    run = _run(probe)
    ranks = run["ranks"]
    if any(r["timed_out"] or r["error"] or r["destroyed"] is None for r in ranks):
        _failed_ranks(run)
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
            f"rank {r['rank']} never wrapped a model in DistributedDataParallel: each rank would train alone and "
            "nothing "
            "would keep the copies in sync. After init_process_group, wrap the model: model = "
            "DistributedDataParallel(model)."
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
    if sizes == [0] and not _get(r, "wrapped")[0]:
        _params(r)  # fails: no model was wrapped at all
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
        return list(zip(starts, [*starts[1:], len(sizes)], strict=True)), "passes"
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


def _loss_scale(r):
    """How many times the script's loss gradient (mean cross-entropy) reached the DDP output in the first training
    batches, or None where the gradient was not proportional to it (another loss) or not observed."""
    data = _get(r, "scales")
    rows = [data[i:i + 2] for i in range(0, len(data), 2)]
    factors = [f for f, misfit in rows if math.isfinite(f) and math.isfinite(misfit) and misfit < 0.01]
    if not factors or len(factors) < len(rows):
        return None
    factors.sort()
    return factors[len(factors) // 2]


def _scaled(r):
    lrs = _get(r, "lrs")
    return lrs != [-1.0] and math.isclose(lrs[-1], SCALED_LR, rel_tol=1e-6)


def _name(r, key):
    """The type name the probe recorded for what train returned (as bytes), or None."""
    entry = r["state"].get(PREFIX + key)
    return bytes(entry["data"]).decode(errors="replace") if entry else None


def test_every_rank_finishes(probe):
    ranks = _ranks(probe)
    for r in ranks:
        if not r["destroyed"]:
            pytest.fail(
                f"rank {r['rank']} returned with the process group still initialised: call "
                "dist.destroy_process_group() "
                "at the end of train, on every rank."
            )
        returned = _name(r, "returned")
        if returned:
            pytest.fail(
                f"train on rank {r['rank']} returned a {returned}; expected a dict: "
                "return {'val_accuracy': accuracy} with accuracy a 0-dim tensor."
            )
        kind = _name(r, "type.val_accuracy")
        if kind:
            pytest.fail(
                f"train on rank {r['rank']} returned val_accuracy as a Python {kind}; expected a 0-dim tensor: "
                "return the tensor itself (for example correct / seen of the all-reduced count tensors), or wrap the "
                "number in torch.tensor(...)."
            )
        got = r["state"].get("val_accuracy")
        if got is None or got["shape"] not in ([], [1]):
            keys = sorted(k for k in r["state"] if not k.startswith(PREFIX))
            shape = "" if got is None else f" (val_accuracy has shape {tuple(got['shape'])})"
            pytest.fail(
                f"train on rank {r['rank']} returned keys {keys}{shape}; expected "
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
                f"rank {r['rank']} trained on samples that are not in make_data()'s training set. Every rank must "
                "build "
                "the same data with the script's make_data(); the sampler then picks each rank's share."
            )
        firsts[r["rank"]] = first
    a, b = firsts[0], firsts[1]
    shared = set(a) & set(b)
    if shared or not len(a) == len(b) == len(set(a)) == PER_RANK:
        pytest.fail(
            f"in the first epoch rank 0 trained on {len(a)} samples and rank 1 on {len(b)}, {len(shared)} of them the "
            f"same (e.g. indices {sorted(shared)[:8]}); each of the {WORLD} ranks should train on its own {PER_RANK} "
            "of "
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
        set_epochs = [flag for flag in _get(r, "set_epochs") if flag >= 0]
        if samplers and not samplers[0][4]:
            cause = ("Its DistributedSampler was made with shuffle=False, which keeps one order for good: leave "
                     "shuffle=True (the default) and call sampler.set_epoch(epoch) at the start of every epoch.")
        elif samplers and len({row[1] for row in samplers}) == 1 and set_epochs and not any(set_epochs):
            cause = (f"Your code called set_epoch {len(set_epochs)} times, but never on the training set's "
                     "DistributedSampler (on a sampler over another dataset, such as the validation set): the "
                     "training "
                     f"sampler stayed at epoch {samplers[0][1]}. Call set_epoch(epoch) on the sampler that feeds the "
                     "training DataLoader, at the start of every epoch.")
        elif samplers and len({row[1] for row in samplers}) == 1 and any(set_epochs):
            cause = (f"Your training sampler's set_epoch was called, but its epoch was {samplers[0][1]} at every pass: "
                     "give it the epoch's number, sampler.set_epoch(epoch), so each epoch gets a new shuffle.")
        elif samplers and len({row[1] for row in samplers}) == 1:
            cause = ("DistributedSampler shuffles with a seed plus the epoch number it was given, and your code never "
                     "called set_epoch: call sampler.set_epoch(epoch) at the start of every epoch, or every epoch "
                     "repeats the first shuffle and each rank keeps the same half of the data for the whole run.")
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
                f"rank {r['rank']} trained on batches of up to {max(sizes)} samples. Keep the script's {BATCH} per "
                "GPU: "
                f"every rank runs its own batch, so one step already learns from {BATCH} x {WORLD} = {BATCH * WORLD} "
                f"samples, and {max(sizes)} per rank makes the global batch {max(sizes) * WORLD}. Do not multiply the "
                "per-rank batch by the world size: DDP does that for you."
            )
        if max(sizes) < BATCH:
            pytest.fail(
                f"rank {r['rank']} trained on batches of up to {max(sizes)} samples. Keep the script's {BATCH} per "
                "GPU, "
                f"so that one step takes a global batch of {BATCH} x {WORLD} = {BATCH * WORLD}. Do not divide the "
                "batch "
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
                   f"{EPOCHS} epochs." if math.isclose(last, LR) else
                   f": your rate is the script's multiplied by the batch size itself ({last / LR:g}), not by the "
                   f"factor the batch grew by ({BATCH * WORLD} / {BATCH} = {WORLD})."
                   if any(math.isclose(last, LR * b, rel_tol=1e-6) for b in (BATCH, BATCH * WORLD)) else ".")
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
            why = (f"With {WORLD} ranks an epoch has {WORLD} times fewer steps: scale the learning rate with the "
                   f"global batch ({LR} -> {SCALED_LR:g}) so the {EPOCHS} epochs still suffice.")
        elif max(sizes) != BATCH:
            why = (f"It trained on batches of up to {max(sizes)} samples per rank: keep the script's {BATCH} per GPU, "
                   f"with the rate scaled for that global batch of {BATCH * WORLD}.")
        elif (scale := _loss_scale(r0)) is not None and not math.isclose(scale, 1.0, rel_tol=0.02):
            halved = math.isclose(scale, 1 / WORLD, rel_tol=0.02)
            why = (f"The gradients your backward passes started from were {scale:.3g} times those of the script's loss "
                   "(cross-entropy averaged over the batch)"
                   + (f": the loss was divided by {WORLD}, the world size. DDP already averages the gradients over the "
                      "ranks, so dividing the loss as well shrinks every step, as an unscaled learning rate would. Use "
                      "the script's loss as it is." if halved else
                      ": your loss is scaled, and every step with it. Use the script's loss as it is (DDP averages the "
                      "gradients over the ranks by itself)."))
        elif scale is None:
            why = ("The epochs, the batch and the scaled rate look right; check what else differs from the script: the "
                   "starting weights (torch.manual_seed(0), then build_model()), the loss (the batch's mean "
                   "cross-entropy, not divided or scaled), and each rank's share of the data.")
        else:
            why = ("The epochs, the batch, the scaled rate and the loss's gradient look right; check what else differs "
                   "from the script: the starting weights (torch.manual_seed(0), then build_model()) and each rank's "
                   "share of the data.")
        pytest.fail(
            f"{trained}, and the final model classifies {acc:.1%} of the {N_VAL} validation samples correctly; the "
            f"single-device script reaches about 92% in {EPOCHS} epochs, and the DDP version must reach {TARGET:.0%} "
            f"in the same {EPOCHS}. {why}"
        )


def _accuracies(state):
    """The final model's accuracy on the whole validation set and on each rank's share of it, as a
    DistributedSampler(shuffle=False) deals it (every WORLD-th sample) and as contiguous blocks."""
    model = build_model()
    model.load_state_dict({k: v.float() for k, v in state.items()})
    x, y = make_data()[1].tensors
    with torch.no_grad():
        hit = (model(x).argmax(dim=1) == y).double()
    block = N_VAL // WORLD
    return (float(hit.mean()), [float(hit[k::WORLD].mean()) for k in range(WORLD)],
            [float(hit[k * block:(k + 1) * block].mean()) for k in range(WORLD)])


def _accuracy_cause(rank, got, acc, dealt, blocks):
    """Name what the reported number is, where it matches one of the ways to get it wrong."""
    close = lambda a, b: abs(a - b) < 1e-6  # noqa: E731
    if close(got, dealt[rank]) or close(got, blocks[rank]):
        how = ("every second sample, as DistributedSampler(shuffle=False) deals them" if close(got, dealt[rank])
               else "a contiguous block")
        return (f"That is the final model's accuracy on rank {rank}'s own half of the validation set ({how}): a local "
                "number. Sum the correct predictions and the sample counts over the ranks with "
                "dist.all_reduce(tensor, op=dist.ReduceOp.SUM) and divide, so every rank reports the accuracy of the "
                "whole validation set.")
    if close(got, WORLD * acc):
        return (f"That is {WORLD} times the accuracy, above 1, so no fraction of the samples: a sum over the {WORLD} "
                "ranks that was never divided. Candidates: the ranks' accuracies all-reduced with SUM and not divided "
                "by world_size, or the correct counts summed over the ranks but divided by one rank's sample count. "
                "Sum the correct predictions and the sample counts, then divide one by the other.")
    if close(got, acc / WORLD):
        return (f"That is 1/{WORLD} of the accuracy. Candidates: the correct counts of one rank divided by the sample "
                f"count of all ranks, or the all-reduced accuracy divided by world_size once more. Sum the correct "
                "predictions and the sample counts over the ranks, then divide one by the other.")
    return ("Candidates: an accuracy measured on part of the validation set (one rank's shard, without an "
            "all_reduce), on another model than the final one (before the last epoch), or a sum that was never "
            "divided. Sum the correct predictions and the sample counts over the ranks with "
            "dist.all_reduce(tensor, op=dist.ReduceOp.SUM) and divide, after training, so every rank reports the "
            "accuracy of the whole validation set.")


def test_reported_accuracy_is_global(probe):
    ranks = _ranks(probe)
    acc, dealt, blocks = _accuracies(_params(ranks[0]))
    for r in ranks:
        entry = r["state"].get("val_accuracy")
        if entry is None or not entry["data"]:
            pytest.fail(f"train on rank {r['rank']} returned no val_accuracy, so there is no accuracy to check.")
        got = float(entry["data"][0])
        if abs(got - acc) >= 1e-6:
            pytest.fail(
                f"rank {r['rank']} reported val_accuracy {got:.4f}, but the final model classifies {acc:.4f} of all "
                f"{N_VAL} validation samples correctly. " + _accuracy_cause(r["rank"], got, acc, dealt, blocks)
            )


def test_only_rank0_writes(probe):
    ranks = _ranks(probe)
    saves = {r["rank"]: int(_get(r, "saves")[0]) for r in ranks}
    if saves[0] < 1 and any(saves.values()):
        savers = " and ".join(f"rank {rank}" for rank, n in saves.items() if n)
        pytest.fail(
            f"torch.save ran on {savers} but not on rank 0 (saves per rank: {saves}): the condition around the save "
            "picks the wrong rank (`if rank:` is true on every rank except 0). Save `if rank == 0:`."
        )
    if saves[0] < 1:
        pytest.fail(
            f"no rank called torch.save; save the checkpoint with torch.save(state_dict, checkpoint_path) "
            f"from rank 0 (saves per rank: {saves})."
        )
    if any(n for rank, n in saves.items() if rank != 0):
        pytest.fail(
            f"torch.save was called on every rank (saves per rank: {saves}). The copies are identical, so one file is "
            "enough: with several ranks writing the same path at once, the file can end up mixed or half-written, and "
            "N GPUs write N times the data. Save only `if rank == 0:` (then dist.barrier() if the others must wait for "
            "it)."
        )


def _keys(keys, limit=4):
    return ", ".join(repr(k) for k in keys[:limit]) + (", ..." if len(keys) > limit else "")


def test_checkpoint_loads_into_plain_model(probe):
    run = _run(probe)
    ckpt = run["checkpoint"]
    if not ckpt["exists"]:
        ranks = _ranks(probe)  # a rank that failed before the save is told first
        saves = {r["rank"]: int(_get(r, "saves")[0]) for r in ranks}
        pytest.fail(
            "no checkpoint at checkpoint_path after training"
            + (f" (torch.save calls per rank: {saves}): save rank 0's model with "
               "torch.save(model.module.state_dict(), checkpoint_path)." if not any(saves.values()) else
               f", although torch.save was called (calls per rank: {saves}): save to the checkpoint_path that train "
               "was given, unchanged.")
        )
    if ckpt["pickled"]:
        what = "the DistributedDataParallel wrapper" if ckpt["pickled"] == "DistributedDataParallel" else "a model"
        pytest.fail(
            f"the checkpoint holds a whole pickled {ckpt['pickled']} object ({what}), not a state_dict: "
            "torch.load refuses to unpickle such an object by default (weights_only=True since PyTorch 2.6), and a "
            "pickled model only loads where its class's code is importable. Save the parameters instead: "
            "torch.save(model.module.state_dict(), checkpoint_path), which loads into a plain build_model() with "
            "load_state_dict."
        )
    if ckpt["load_error"] == "torch.load":
        feedback.fail(
            f"torch.load(checkpoint_path, weights_only=True) could not read the checkpoint (it raised "
            f"{ckpt['type'] or 'an error'}). Write it with torch.save(model.module.state_dict(), checkpoint_path), "
            "from rank 0 only, and let nothing else write to that path.",
            details=ckpt["load_detail"],
        )
    if ckpt["load_error"] == "keys":
        keys, said = ckpt["keys"], []
        if ckpt["missing"]:
            said.append(f"missing {_keys(ckpt['missing'])}")
        if ckpt["unexpected"]:
            said.append(f"unexpected {_keys(ckpt['unexpected'])}")
        for key, want, got in ckpt["shapes"][:2]:
            said.append(f"{key!r} has shape {tuple(got)} where the model's is {tuple(want)}")
        hint = ""
        if any(k.startswith("module.") for k in keys):
            hint = (
                " Its keys start with 'module.': that is the DistributedDataParallel wrapper's state_dict (DDP keeps "
                "your model as .module). Save model.module.state_dict(), so the file loads into a plain model "
                "without DDP, for evaluation or inference on one device."
            )
        pytest.fail(
            "the checkpoint's keys do not fit a plain build_model(), whose keys are "
            f"{_keys(list(build_model().state_dict()))}. The checkpoint has " + "; ".join(said) + "." + hint
        )
    if ckpt["load_error"]:
        feedback.fail(
            "the checkpoint has the right keys and shapes, but load_state_dict into a plain build_model() refused it: "
            "save the model's own tensors, torch.save(model.module.state_dict(), checkpoint_path).",
            details=ckpt["load_detail"],
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
            f"the checkpoint's parameters differ from the trained model's by up to {diff:.3g}; save after the last "
            "epoch."
        )
