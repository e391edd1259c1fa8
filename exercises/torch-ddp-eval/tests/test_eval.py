"""Hidden tests for evaluate(rank, world_size): two real ranks over gloo, exact metrics of the whole validation set.

The ranks run once per grading job (the first test that needs them); each test then reads the same results. The
right numbers are computed here, in one process, from the same model and data. What a message says caused a wrong
number comes from what the probe saw each rank do (which samples went through the model, which collectives it
called with how many values, which DistributedSampler it iterated); where the observations leave several causes,
the message says what was seen and names the candidates as candidates.
"""

import math
from collections import Counter

import pytest
import torch
from probes import BATCH, N_VAL, PREFIX, build_model, make_val_data
from runner import feedback

WORLD = 2
TIMEOUT_S = 40.0
SHARE = math.ceil(N_VAL / WORLD)  # DistributedSampler gives every rank this many indices, padding included
TOTAL_PADDED = SHARE * WORLD
PAD = TOTAL_PADDED - N_VAL
REAL = [len(range(r, N_VAL, WORLD)) for r in range(WORLD)]  # each rank's real samples: 51 and 50
KEPT = N_VAL - N_VAL % WORLD  # what drop_last=True keeps
# Collectives that need a tensor of one shape and dtype on every rank (gloo refuses or breaks otherwise).
SAME_SHAPE = {"all_reduce", "all_gather", "all_gather_into_tensor", "broadcast", "reduce"}
_cache: dict = {}


def _hits() -> torch.Tensor:
    """Return, per validation sample, whether the model classifies it right (1) or not (0)."""
    if "hits" not in _cache:
        x, y = make_val_data()
        with torch.no_grad():
            _cache["predictions"] = build_model()(x).argmax(dim=1)
        _cache["hits"] = (_cache["predictions"] == y).long()
    return _cache["hits"]


def _padded_shard(rank: int) -> list[int]:
    """DistributedSampler(shuffle=False)'s indices for rank: the list padded with its start, then every WORLD-th."""
    indices = list(range(N_VAL))
    indices += indices[:PAD]
    return indices[rank::WORLD]


def _misaligned() -> set[int]:
    """Correct counts from comparing predictions gathered rank by rank with the labels in dataset order."""
    _hits()
    labels = make_val_data()[1]
    out = set()
    for order in (
        [i for r in range(WORLD) for i in _padded_shard(r)][:N_VAL],
        [i for r in range(WORLD) for i in range(r, N_VAL, WORLD)],
    ):
        out.add(int((_cache["predictions"][order] == labels).sum()))
    return out


# ---------------------------------------------------------------- what the probe saw


def _seen(r) -> dict:
    return {"collectives": [], "samplers": [], "samples": [], "destroyed_after": [], **(r.get("seen") or {})}


def _times(n: int) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _calls(r) -> str:
    """Say which collectives rank r called: 'rank 0 called all_reduce twice'."""
    ops = Counter(c["op"] for c in _seen(r)["collectives"])
    if not ops:
        return f"rank {r['rank']} called no collective"
    return f"rank {r['rank']} called " + ", ".join(f"{op} {_times(n)}" for op, n in ops.items())


def _samples(indices: list[int]) -> str:
    if len(indices) == 1:
        return f"sample {indices[0]}"
    shown = ", ".join(str(i) for i in indices[:8])
    return f"samples {shown}" + (f", ... ({len(indices)} in all)" if len(indices) > 8 else "")


def _collective_mismatch(runs) -> str:
    """Describe the first collective the ranks did not call alike (which op, how many values, dtype), or ''."""
    seqs = [_seen(r)["collectives"] for r in runs]
    for i in range(max(len(s) for s in seqs)):
        at = [s[i] if i < len(s) else None for s in seqs]
        if any(c is None for c in at):
            calling = [r["rank"] for r, c in zip(runs, at, strict=True) if c is not None]
            absent = [r["rank"] for r, c in zip(runs, at, strict=True) if c is None]
            op = next(c["op"] for c in at if c is not None)
            return (
                f"Rank {calling[0]}'s {_ordinal(i + 1)} collective was {op}, which rank {absent[0]} never reached "
                f"({'; '.join(_calls(r) for r in runs)}): every rank must call the same "
                "collectives, in the same order (a collective under `if rank == 0:` leaves the other ranks out)."
            )
        if len({c["op"] for c in at}) > 1:
            return (
                f"The ranks' {_ordinal(i + 1)} collectives differ ("
                + ", ".join(f"rank {r['rank']}: {c['op']}" for r, c in zip(runs, at, strict=True))
                + "): every rank must call the same collectives, in the same order."
            )
        op = at[0]["op"]
        if op in SAME_SHAPE and (len({c["values"] for c in at}) > 1 or len({c["dtype"] for c in at}) > 1):
            sizes = ", ".join(
                f"rank {r['rank']}: {c['values']} {c['dtype']} values" for r, c in zip(runs, at, strict=True)
            )
            hint = (
                " To gather shards of unequal length, pad each rank's tensor to one length (and gather the true "
                "lengths too), all-reduce the counts instead, or use dist.all_gather_object."
                if op.startswith("all_gather")
                else ""
            )
            return (
                f"The ranks' {_ordinal(i + 1)} collective, {op}, got tensors of different sizes ({sizes}): {op} "
                f"needs a tensor of the same shape and dtype on every rank.{hint}"
            )
    return ""


def _coverage(runs) -> tuple[list[int], list[int]] | None:
    """Return (samples no rank ran through the model, samples more than one rank ran), None if rows were unknown."""
    per_rank = []
    for r in runs:
        got = _seen(r)["samples"]
        if -1 in got or len(got) != _observed(r, "rows"):
            return None
        per_rank.append(set(got))
    everything = set().union(*per_rank)
    missing = sorted(set(range(N_VAL)) - everything)
    shared = sorted(i for i in everything if sum(i in p for p in per_rank) > 1)
    return missing, shared


def _samplers(runs) -> list[tuple[int, dict]]:
    return [(r["rank"], s) for r in runs for s in _seen(r)["samplers"]]


def _why_missing(runs, shared: list[int]) -> str:
    """Say why samples went through no rank's model: the cause the probe saw, else the candidates."""
    samplers = _samplers(runs)
    dropping = sorted({rank for rank, s in samplers if s["drop_last"]})
    if dropping:
        return (
            f"DistributedSampler(drop_last=True) (on {'rank' if len(dropping) == 1 else 'ranks'} "
            f"{' and '.join(map(str, dropping))}) cuts the index list to a "
            f"multiple of the world size, so samples {KEPT} and up are never evaluated. Keep drop_last=False (it pads "
            "instead) and leave the padded duplicates out of the counts, or shard without padding"
        )
    parts = [(rank, s) for rank, s in samplers if s["dataset"] != N_VAL]
    if parts:
        rank, s = parts[0]
        return (
            f"rank {rank}'s DistributedSampler splits a dataset of {s['dataset']} samples, not the {N_VAL} of the "
            "validation set: it was handed a part of the set (a shard already), so the ranks split it a second time. "
            f"Shard once: a DistributedSampler over the whole set, or a Subset of range(rank, {N_VAL}, world_size) "
            "with a plain DataLoader"
        )
    off = [(rank, s) for rank, s in samplers if s["num_replicas"] != WORLD or s["rank"] != rank]
    if off:
        rank, s = off[0]
        return (
            f"rank {rank} iterated a DistributedSampler built with num_replicas={s['num_replicas']}, "
            f"rank={s['rank']}: pass num_replicas=world_size and rank=rank, the arguments evaluate receives"
        )
    shuffled = {rank: (s["seed"], s["epoch"]) for rank, s in samplers if s["shuffle"]}
    if len(shuffled) == WORLD and len(set(shuffled.values())) > 1:
        said = "; ".join(f"rank {rank}: seed {seed}, epoch {epoch}" for rank, (seed, epoch) in sorted(shuffled.items()))
        return (
            f"the ranks shuffled with different seeds or epochs ({said}), so each rank took its share of a different "
            "permutation, and the shares overlap. Shuffle with the same seed and epoch on every rank (the default "
            "seed; set_epoch with the same number), or do not shuffle for evaluation"
        )
    if len(shared) > PAD:
        return (
            f"the ranks' shares overlap ({_samples(shared)} went through the model on more than one rank), so others "
            f"went through none. Give rank r the samples r, r + world_size, ... (a DistributedSampler built with "
            "num_replicas=world_size and rank=rank, the same seed everywhere), or contiguous blocks that do not overlap"
        )
    tail = _samples(list(range(N_VAL // WORLD * WORLD, N_VAL)))
    return (
        "the shards do not cover the set. A candidate: blocks of len(dataset) // world_size samples, which leave "
        f"out {tail}; use blocks of ceil(len(dataset) / world_size) with the last one cut short, or the samples "
        f"range(rank, {N_VAL}, world_size)"
    )


# ---------------------------------------------------------------- running the ranks


def _ranks(probe):
    if "runs" not in _cache:
        try:
            _cache["runs"] = probe("run", world_size=WORLD, timeout_s=TIMEOUT_S)
        except Exception as exc:
            _cache["runs"] = exc
    runs = _cache["runs"]
    if isinstance(runs, Exception):
        feedback.fail(feedback.raised(f"running evaluate on {WORLD} ranks", type(runs).__name__, str(runs)))
    return runs


def _ok_ranks(probe):
    runs = _ranks(probe)
    bad = [r for r in runs if r["timed_out"] or r["error"] or r["destroyed"] is None]
    if bad:
        errors = {(r["error"]["type"], r["error"]["message"]) if r["error"] else None for r in runs}
        if len(errors) == 1 and None not in errors:  # every rank raised the same: say it once
            ((type_name, message),) = errors
            got = feedback.raised("evaluate on every rank", type_name, message)
            if got.cause == "process_group.missing" and all(_seen(r)["destroyed_after"] for r in runs):
                feedback.fail(
                    "evaluate on every rank called dist.destroy_process_group() and then still needed the process "
                    "group (a collective, or something else distributed, came after it), which no longer existed. "
                    "Destroy the process group once, after the last collective, just before returning.",
                    details=got.details,
                )
            feedback.fail(got)
        got = feedback.ranks(runs, what="evaluate", timeout_s=TIMEOUT_S)
        seen = _collective_mismatch(runs)
        feedback.fail(got.message + (f" {seen}" if seen else ""), details=got.details)
    return runs


def _metrics(r) -> dict[str, float]:
    state = r["state"]
    missing = [k for k in ("correct", "total", "accuracy") if k not in state]
    if missing:
        got = sorted(k for k in state if not k.startswith(PREFIX))
        pytest.fail(
            f"rank {r['rank']} returned the keys {got}; evaluate must return a dict with 'correct', 'total' and "
            f"'accuracy' (missing: {missing})."
        )
    return {k: float(state[k]["data"][0]) for k in ("correct", "total", "accuracy")}


def _observed(r, name: str) -> int:
    return int(r["state"][PREFIX + name]["data"][0])


def _own_shard_why(r) -> str:
    """Why rank r's numbers are its own shard's: no collective at all, or collectives whose result was not used."""
    if not _seen(r)["collectives"]:
        return (
            f"nothing was gathered across the ranks ({_calls(r)}). Sum the correct predictions and the sample counts "
            "of all ranks (dist.all_reduce of a [correct, total] tensor with ReduceOp.SUM) and divide the sums"
        )
    return (
        f"{_calls(r)}, but the numbers it returned are still its own: the collective's result did not reach them. "
        "dist.all_reduce(t) sums into the tensor t you pass it (it returns no sum), so keep a reference to that "
        "tensor and read the sums from it"
    )


# ---------------------------------------------------------------- the tests


def test_every_rank_finishes(probe, measure):
    runs = _ok_ranks(probe)
    # The learner's own collectives are all the communication here: show how many rank 0 made.
    measure.record("collective calls by rank 0", len(_seen(runs[0])["collectives"]), unit="calls")


def test_each_rank_evaluates_its_share(probe, measure):
    runs = _ok_ranks(probe)
    rows = [_observed(r, "rows") for r in runs]
    measure.record("samples evaluated by rank 0", rows[0], unit="samples", target=SHARE, compare="<=")
    if all(_observed(r, "built") == 0 for r in runs):
        pytest.fail("evaluate never called build_model(): evaluate the model build_model() returns.")
    for r, n in zip(runs, rows, strict=True):
        if n > N_VAL:
            pytest.fail(
                f"rank {r['rank']} ran {n} samples through the model; its share of the {N_VAL} validation samples is "
                f"at most {SHARE}, and {n} is more than the whole set: that rank ran samples through the model more "
                "than once (for example a second pass over the whole set, to check or log a number, besides its "
                "share). Every pass counts: evaluate only this rank's share, and log what the gathered counts give."
            )
        assert n <= SHARE, (
            f"rank {r['rank']} ran {n} samples through the model; its share of the {N_VAL} validation samples is at "
            f"most {SHARE}. Evaluating the whole set on every rank gives exact numbers but no speed-up: let each rank "
            "evaluate its own share (a DistributedSampler, or indices rank, rank + world_size, ...) and gather the "
            "counts."
        )
    cover = _coverage(runs)
    if cover is not None:
        missing, shared = cover
        if missing:
            why = _why_missing(runs, shared)
            pytest.fail(
                f"no rank ran {_samples(missing)} through the model (the ranks ran {' and '.join(map(str, rows))} "
                f"samples); every one of the {N_VAL} validation samples must be evaluated. {why[:1].upper()}{why[1:]}."
            )
    elif sum(rows) < N_VAL:
        pytest.fail(
            f"the ranks ran only {sum(rows)} samples through the model together ({rows}); every one of the {N_VAL} "
            "validation samples must be evaluated."
        )


def test_counts_each_sample_once(probe):
    runs = _ok_ranks(probe)
    got = _metrics(runs[0])
    right_correct = int(_hits().sum())
    total, correct = got["total"], got["correct"]
    if total == N_VAL and correct == right_correct:
        return
    rows = [_observed(r, "rows") for r in runs]
    said = (
        f"rank 0 reported correct = {correct:g}, total = {total:g}; the validation set has {N_VAL} samples, of which "
        f"the model classifies {right_correct} right."
    )
    cover = _coverage(runs)
    if cover is None:
        pytest.fail(
            f"{said} Count every sample exactly once over all ranks: the padded duplicates out, nothing dropped, the "
            "ranks' counts summed."
        )
    missing, shared = cover
    if missing:
        pytest.fail(f"{said} No rank ran {_samples(missing)} through the model: {_why_missing(runs, shared)}.")
    # From here on every sample went through some rank's model.
    ran = " + ".join(map(str, rows))
    if correct == right_correct:
        padded = (
            f": it equals the padded shards' length ({SHARE} per rank, {TOTAL_PADDED} in all), which includes "
            f"DistributedSampler's duplicate of sample 0"
            if total == TOTAL_PADDED
            else ""
        )
        pytest.fail(
            f"{said} The correct count is the whole set's, but the total is not{padded}. Count the total the way you "
            f"count the correct predictions: each real sample once, summed over the ranks ({N_VAL} in all)."
        )
    if total > N_VAL and total == sum(rows):
        padded = any(s["dataset"] == N_VAL and not s["drop_last"] for _, s in _samplers(runs))
        if padded:
            pytest.fail(
                f"{said} That total is every row the ranks ran through the model ({ran}), duplicates included. "
                f"DistributedSampler pads the index list to a multiple of the world size by repeating its start: "
                f"{N_VAL} samples on {WORLD} ranks become {TOTAL_PADDED}, and rank {N_VAL % WORLD}'s last sample is "
                f"sample 0 again. You counted the padding: leave out each rank's samples past its real share, "
                f"len(range(rank, {N_VAL}, world_size)) (the padding comes last), or shard without padding."
            )
        pytest.fail(
            f"{said} That total is every row the ranks ran through the model ({ran}), and {_samples(shared)} went "
            "through it on more than one rank: count each sample once."
        )
    if total > sum(rows):
        pytest.fail(
            f"{said} That total is more than the {sum(rows)} rows the ranks ran through the model together ({ran}), "
            f"so counts were added up more than once ({_calls(runs[0])}). Candidates: a collective on running totals "
            "inside the batch loop (each all_reduce adds the batches already summed once more), or sums reduced a "
            "second time. Count on each rank first, then combine the counts once, after the loop."
        )
    own_totals = {REAL[0], len(_padded_shard(0))}
    own_correct = {float(_hits()[_padded_shard(0)].sum()), float(_hits()[0::WORLD].sum())}
    if total in own_totals:
        pytest.fail(f"{said} That is rank 0's own share: {_own_shard_why(runs[0])}.")
    if total == N_VAL and correct in own_correct:
        if not _seen(runs[0])["collectives"]:
            pytest.fail(
                f"{said} The total is the whole set's, but the correct count is rank 0's own shard's ({_calls(runs[0])}"
                "): under DistributedSampler each rank sees only its share, so dividing a shard's count by "
                "len(dataset) is the single-device formula. Sum the correct counts over the ranks (dist.all_reduce) "
                "first."
            )
        pytest.fail(
            f"{said} The total is the whole set's, but the correct count is rank 0's own shard's: "
            f"{_own_shard_why(runs[0])}."
        )
    if total < N_VAL:
        pytest.fail(
            f"{said} Every sample went through some rank's model ({ran} rows), but the counts hold only {total:g}: "
            f"more than the padding was left out. DistributedSampler puts a duplicate only on the ranks from "
            f"{N_VAL % WORLD} up: rank r has len(range(r, {N_VAL}, world_size)) real samples "
            f"({' and '.join(map(str, REAL))}), and only what comes after them is padding. Candidates: the padding's "
            "size left out on every rank, or a real share computed as len(dataset) // world_size."
        )
    if total == N_VAL and correct in _misaligned():
        pytest.fail(
            f"{said} Every sample went through the model and the total is right, but the correct count matches "
            "comparing the predictions gathered rank by rank (all of rank 0's, then rank 1's) with the labels in "
            "dataset order. Gathered predictions come in the sampler's order, rank 0 holding samples 0, 2, 4, ...: "
            "put each prediction back at its sample's index (gather the indices too), or count the hits on each "
            "rank before combining."
        )
    pytest.fail(
        f"{said} Every sample went through some rank's model ({ran} rows). Count every sample exactly once over all "
        "ranks: the padded duplicates out, the ranks' counts summed, each prediction compared with its own sample's "
        "label."
    )


def _mistakes(runs) -> list[tuple[float, str]]:
    """Return (accuracy, what produces it) for each classic mistake, worded from what the probe saw."""
    hits = _hits()
    padded = [_padded_shard(r) for r in range(WORLD)]
    real = [list(range(r, N_VAL, WORLD)) for r in range(WORLD)]
    dropped = [list(range(r, KEPT, WORLD)) for r in range(WORLD)]
    acc = lambda idx: float(hits[idx].sum()) / len(idx)  # noqa: E731
    dup = sum(int(hits[p].sum()) for p in padded) / TOTAL_PADDED
    cover = _coverage(runs)
    if any(s["drop_last"] for _, s in _samplers(runs)):
        tail = (
            "DistributedSampler(drop_last=True) drops the tail instead of padding, so the metric misses samples. Keep "
            "drop_last=False and leave out the padded duplicates instead, or shard without padding"
        )
    elif cover is not None and cover[0]:
        why = _why_missing(runs, cover[1])
        tail = f"no rank ran {_samples(cover[0])} through the model. {why[:1].upper()}{why[1:]}"
    elif cover is not None:
        tail = (
            f"sample {N_VAL - 1} went through rank {(N_VAL - 1) % WORLD}'s model but was left out of the counts. Only "
            f"the ranks from {N_VAL % WORLD} up carry a padded duplicate: rank r has len(range(r, {N_VAL}, "
            "world_size)) real samples, and only what comes after them is padding"
        )
    else:
        tail = (
            f"sample {N_VAL - 1} is not in the counts. Candidates: DistributedSampler(drop_last=True), shards of "
            "len(dataset) // world_size samples, or more than the padding left out of the counts"
        )
    return [
        *(
            (value, f"the accuracy of rank 0's own shard: {_own_shard_why(runs[0])}")
            for value in (acc(padded[0]), acc(real[0]))
        ),
        (
            float(hits[padded[0]].sum()) / N_VAL,
            f"rank 0's correct predictions (on its shard only) divided by len(dataset) = {N_VAL}: the single-device "
            "formula, but under DistributedSampler each rank sees only its share. "
            + (
                "Nothing was gathered: sum the correct predictions and the counts over the ranks (dist.all_reduce) "
                "before dividing"
                if not _seen(runs[0])["collectives"]
                else f"{_calls(runs[0])[:1].upper()}{_calls(runs[0])[1:]}, but the correct count it divided was its own"
            ),
        ),
        (
            dup,
            f"counting the padding: DistributedSampler pads {N_VAL} samples to {TOTAL_PADDED} by repeating the start "
            f"of its index list, so rank {N_VAL % WORLD} evaluates sample 0 a second time. Summing counts over the "
            "padded shards (or averaging the accuracies of the equal padded shards) counts that duplicate. Leave out "
            "each rank's samples past its real share (the padding comes last), or shard without padding",
        ),
        (
            sum(acc(r) for r in real) / WORLD,
            "the mean of the ranks' accuracies, but the shards are not equal ("
            + " and ".join(str(len(r)) for r in real)
            + " real samples): averaging accuracies weighs every rank alike, not every sample. Sum the correct "
            "counts and the totals over the ranks, then divide",
        ),
        (
            float(hits[[i for d in dropped for i in d]].sum()) / KEPT,
            f"the accuracy of the first {KEPT} samples only: {tail}",
        ),
        *(
            (
                value / N_VAL,
                "comparing the predictions gathered rank by rank (all of rank 0's, then rank 1's) with the labels in "
                "dataset order: gathered predictions come in the sampler's order. Put each prediction back at its "
                "sample's index (gather the indices too), or count the hits on each rank before combining",
            )
            for value in sorted(_misaligned())
        ),
    ]


def test_accuracy_is_exact(probe, measure):
    runs = _ok_ranks(probe)
    m = _metrics(runs[0])
    got = m["accuracy"]
    right = float(_hits().sum()) / N_VAL
    measure.record("accuracy reported by rank 0", got, target=right, compare="==")
    if abs(got - right) <= 1e-6:
        return
    said = (
        f"rank 0 reported accuracy {got:.6f}; the whole validation set's is {right:.6f} "
        f"({int(_hits().sum())} of {N_VAL})."
    )
    for value, why in _mistakes(runs):
        if abs(got - value) <= 1e-6:
            pytest.fail(f"{said} It matches {why}.")
    correct, total = m["correct"], m["total"]
    if total > 0 and abs(got - correct / total) > 1e-6:
        if got == correct // total:
            pytest.fail(
                f"{said} It is not the ratio of the counts rank 0 returned ({correct:g} / {total:g} = "
                f"{correct / total:.6f}) but that ratio rounded down to a whole number, {got:g}. Candidates: a floor "
                "division (correct // total), or int(...) of the ratio. Divide with / and keep the fraction."
            )
        pytest.fail(
            f"{said} It is not the ratio of the counts rank 0 returned ({correct:g} / {total:g} = "
            f"{correct / total:.6f}): compute the accuracy as the summed correct count over the summed total."
        )
    cover = _coverage(runs)
    if cover is not None and cover[0]:
        why = _why_missing(runs, cover[1])
        pytest.fail(
            f"{said} It is rank 0's correct / total ({correct:g} / {total:g}), and no rank ran "
            f"{_samples(cover[0])} through the model. {why[:1].upper()}{why[1:]}."
        )
    if correct == int(_hits().sum()) and total != N_VAL:
        pytest.fail(
            f"{said} It is rank 0's correct / total ({correct:g} / {total:g}): the correct count is the whole set's, "
            f"but the total is not {N_VAL}. Divide by the number of real samples, each counted once over the ranks."
        )
    pytest.fail(
        f"{said} It is rank 0's correct / total ({correct:g} / {total:g}), and those counts are not the whole set's. "
        f"Evaluate build_model() on every sample exactly once over the ranks (batches of {BATCH} or any size), sum "
        "the correct predictions and the counts over the ranks, and divide."
    )


def test_ranks_agree(probe):
    runs = _ok_ranks(probe)
    got = [_metrics(r) for r in runs]
    said = lambda m: f"correct {m['correct']:g}, total {m['total']:g}, accuracy {m['accuracy']:.6f}"  # noqa: E731
    for r, m in zip(runs[1:], got[1:], strict=True):
        if all(abs(m[k] - got[0][k]) <= 1e-9 for k in m):
            continue
        head = f"rank 0 returned {said(got[0])}; rank {r['rank']} returned {said(m)}."
        reducing = [x["rank"] for x in runs if any(c["op"] == "reduce" for c in _seen(x)["collectives"])]
        if reducing:
            pytest.fail(
                f"{head} Rank {reducing[0]} called dist.reduce, which leaves the sum on its dst rank alone: the other "
                "ranks keep their own counts. Use dist.all_reduce, which hands every rank the sum."
            )
        if not any(_seen(x)["collectives"] for x in runs):
            pytest.fail(
                f"{head} No rank called a collective, so each returned numbers from what it evaluated itself. "
                "Every rank must return the whole set's metrics: combine the counts with a collective that hands "
                "every rank the result (dist.all_reduce of [correct, total])."
            )
        pytest.fail(
            f"{head} Every rank must return the whole set's metrics, so at least one of them returned numbers it did "
            f"not combine from all ranks ({'; '.join(_calls(x) for x in runs)}). Candidates: its own shard's "
            "numbers, or a result that reached only some ranks (a collective's result read on one rank only). "
            "Combine the counts with a collective that hands every rank the result (dist.all_reduce of "
            "[correct, total])."
        )


def test_process_group_destroyed(probe):
    runs = _ok_ranks(probe)
    kept = [r["rank"] for r in runs if r["destroyed"] is False]
    if kept:
        pytest.fail(
            f"{'rank' if len(kept) == 1 else 'ranks'} {' and '.join(map(str, kept))} returned with the process group "
            "still initialised: evaluate must "
            "call dist.destroy_process_group() before it returns. Destroy it on every rank after the last "
            "collective (a try/finally does it even when something raises)."
        )
