"""Hidden tests for evaluate(rank, world_size): two real ranks over gloo, exact metrics of the whole validation set.

The ranks run once per grading job (the first test that needs them); each test then reads the same results. The
right numbers are computed here, in one process, from the same model and data; the usual mistakes (a rank's own
shard, DistributedSampler's padded duplicate, averaged accuracies, drop_last) are computed too, so a wrong answer
is named by the mistake whose numbers it matches.
"""

import math

import pytest
import torch
from probes import BATCH, N_VAL, PREFIX, build_model, make_val_data

WORLD = 2
SHARE = math.ceil(N_VAL / WORLD)  # DistributedSampler gives every rank this many indices, padding included
TOTAL_PADDED = SHARE * WORLD
PAD = TOTAL_PADDED - N_VAL
_cache: dict = {}


def _hits() -> torch.Tensor:
    """Return, per validation sample, whether the model classifies it right (1) or not (0)."""
    if "hits" not in _cache:
        x, y = make_val_data()
        with torch.no_grad():
            _cache["hits"] = (build_model()(x).argmax(dim=1) == y).long()
    return _cache["hits"]


def _padded_shard(rank: int) -> list[int]:
    """DistributedSampler(shuffle=False)'s indices for rank: the list padded with its start, then every WORLD-th."""
    indices = list(range(N_VAL))
    indices += indices[:PAD]
    return indices[rank::WORLD]


def _mistakes() -> list[tuple[float, str]]:
    """Return (accuracy, what produces it) for each classic mistake, in the order they are tried."""
    hits = _hits()
    padded = [_padded_shard(r) for r in range(WORLD)]
    real = [list(range(r, N_VAL, WORLD)) for r in range(WORLD)]
    dropped = [list(range(r, N_VAL - N_VAL % WORLD, WORLD)) for r in range(WORLD)]
    acc = lambda idx: float(hits[idx].sum()) / len(idx)  # noqa: E731
    dup = sum(int(hits[p].sum()) for p in padded) / TOTAL_PADDED
    return [
        *(
            (
                value,
                "the accuracy of rank 0's own shard: nothing was gathered across the ranks. Sum the correct "
                "predictions and the sample counts of all ranks (dist.all_reduce of a [correct, total] tensor with "
                "ReduceOp.SUM) and divide the sums",
            )
            for value in (acc(padded[0]), acc(real[0]))
        ),
        (
            float(hits[padded[0]].sum()) / N_VAL,
            f"rank 0's correct predictions (on its shard only) divided by len(dataset) = {N_VAL}: the single-device "
            "formula, but under DistributedSampler each rank sees only its share, and nothing was gathered. Sum "
            "the correct predictions and the counts over the ranks (dist.all_reduce) before dividing",
        ),
        (
            dup,
            f"counting the padding: DistributedSampler pads {N_VAL} samples to {TOTAL_PADDED} by repeating the start "
            f"of its index list, so rank {N_VAL % WORLD} evaluates sample 0 a second time. Summing counts over the padded "
            "shards (or averaging the accuracies of the equal padded shards) counts that duplicate. Leave out each "
            "rank's samples past its real share (the padding comes last), or shard without padding",
        ),
        (
            sum(acc(r) for r in real) / WORLD,
            "the mean of the ranks' accuracies, but the shards are not equal ("
            + " and ".join(str(len(r)) for r in real)
            + " real samples): averaging accuracies weighs every rank alike, not every sample. Sum the correct "
            "counts and the totals over the ranks, then divide",
        ),
        (
            float(hits[[i for d in dropped for i in d]].sum()) / (N_VAL - N_VAL % WORLD),
            f"the accuracy of the first {N_VAL - N_VAL % WORLD} samples only: DistributedSampler(drop_last=True) drops "
            "the tail instead of padding, so the metric misses samples. Keep drop_last=False and leave out the padded "
            "duplicates instead, or shard without padding",
        ),
    ]


def _ranks(probe):
    if "runs" not in _cache:
        try:
            _cache["runs"] = probe("run", world_size=WORLD, timeout_s=40.0)
        except Exception as exc:
            _cache["runs"] = exc
    runs = _cache["runs"]
    if isinstance(runs, Exception):
        pytest.fail(f"running evaluate on {WORLD} ranks failed before any rank reported: {type(runs).__name__}: {runs}")
    return runs


def _describe(r) -> str:
    if r["timed_out"]:
        return (
            f"rank {r['rank']} did not finish within 40 s. A rank waits forever in a collective (all_reduce, "
            "all_gather, barrier) that another rank never calls: every rank must call the same collectives, in the "
            "same order"
        )
    if r["error"]:
        e = r["error"]
        return f"rank {r['rank']} raised {e['type']}: {e['message'][:400]}"
    return f"rank {r['rank']} exited without returning a result (exit code {r['exit_code']})"


def _ok_ranks(probe):
    runs = _ranks(probe)
    bad = [r for r in runs if r["timed_out"] or r["error"] or r["destroyed"] is None]
    if bad:
        pytest.fail("; ".join(_describe(r) for r in bad))
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


def test_every_rank_finishes(probe):
    _ok_ranks(probe)


def test_each_rank_evaluates_its_share(probe, measure):
    runs = _ok_ranks(probe)
    rows = [_observed(r, "rows") for r in runs]
    measure.record("samples evaluated by rank 0", rows[0], unit="samples", target=SHARE, compare="<=")
    if all(_observed(r, "built") == 0 for r in runs):
        pytest.fail("evaluate never called build_model(): evaluate the model build_model() returns.")
    for r, n in zip(runs, rows, strict=True):
        assert n <= SHARE, (
            f"rank {r['rank']} ran {n} samples through the model; its share of the {N_VAL} validation samples is at "
            f"most {SHARE}. Evaluating the whole set on every rank gives exact numbers but no speed-up: let each rank "
            "evaluate its own share (a DistributedSampler, or indices rank, rank + world_size, ...) and gather the "
            "counts."
        )
    if sum(rows) < N_VAL:
        why = (
            f" DistributedSampler(drop_last=True) leaves samples {N_VAL - N_VAL % WORLD} and up out so that the "
            "shards are equal: keep drop_last=False (it pads instead) and leave the padded duplicates out of the counts."
            if sum(rows) == N_VAL - N_VAL % WORLD
            else ""
        )
        pytest.fail(
            f"the ranks ran only {sum(rows)} samples through the model together ({rows}); every one of the {N_VAL} "
            f"validation samples must be evaluated.{why}"
        )


def test_counts_each_sample_once(probe):
    runs = _ok_ranks(probe)
    got = _metrics(runs[0])
    right_correct = int(_hits().sum())
    total, correct = got["total"], got["correct"]
    if total == N_VAL and correct == right_correct:
        return
    if total == TOTAL_PADDED:
        pytest.fail(
            f"rank 0 reported total = {total:g}; the validation set has {N_VAL} samples. DistributedSampler pads the "
            f"index list to a multiple of the world size by repeating its start: {N_VAL} samples on {WORLD} ranks "
            f"become {TOTAL_PADDED}, and rank {N_VAL % WORLD}'s last sample is sample 0 again. You counted the padding: "
            f"leave out each rank's samples past its real share, len(range(rank, {N_VAL}, world_size)) (the padding "
            "comes last), or shard without padding."
        )
    if total == N_VAL - N_VAL % WORLD:
        pytest.fail(
            f"rank 0 reported total = {total:g}; the validation set has {N_VAL} samples. DistributedSampler("
            f"drop_last=True) leaves samples {N_VAL - N_VAL % WORLD} and up out to make the shards equal, so they are "
            "never evaluated. Keep drop_last=False and leave the padded duplicates out of the counts instead."
        )
    if total in (SHARE, len(range(0, N_VAL, WORLD)), len(range(1, N_VAL, WORLD))):
        pytest.fail(
            f"rank 0 reported total = {total:g}, its own share of the {N_VAL} samples: the counts were not gathered. "
            "Sum [correct, total] over the ranks with dist.all_reduce(..., op=dist.ReduceOp.SUM) (or gather them) "
            "before dividing."
        )
    if total == N_VAL and correct in {float(_hits()[_padded_shard(0)].sum()), float(_hits()[0::WORLD].sum())}:
        pytest.fail(
            f"rank 0 reported correct = {correct:g} of total = {total:g}: the total is the whole set's, but the "
            f"correct count is rank 0's own shard's ({right_correct} of {N_VAL} is right). Dividing a shard's count "
            "by len(dataset) is the single-device formula: under DistributedSampler nothing was gathered. Sum the "
            "correct counts over the ranks (dist.all_reduce) first."
        )
    pytest.fail(
        f"rank 0 reported correct = {correct:g}, total = {total:g}; the validation set has {N_VAL} samples, of which "
        f"the model classifies {right_correct} right. Count every sample exactly once over all ranks: the padded "
        "duplicates out, nothing dropped, the ranks' counts summed."
    )


def test_accuracy_is_exact(probe, measure):
    runs = _ok_ranks(probe)
    got = _metrics(runs[0])["accuracy"]
    right = float(_hits().sum()) / N_VAL
    measure.record("accuracy reported by rank 0", got, target=right, compare="==")
    if abs(got - right) <= 1e-6:
        return
    for value, why in _mistakes():
        if abs(got - value) <= 1e-6:
            pytest.fail(f"rank 0 reported accuracy {got:.6f}; the whole validation set's is {right:.6f}. It is {why}.")
    pytest.fail(
        f"rank 0 reported accuracy {got:.6f}; the whole validation set's is {right:.6f} ({int(_hits().sum())} of "
        f"{N_VAL}). Evaluate build_model() on every sample exactly once over the ranks (batches of {BATCH} or any "
        "size), sum the correct predictions and the counts over the ranks, and divide."
    )


def test_ranks_agree(probe):
    runs = _ok_ranks(probe)
    got = [_metrics(r) for r in runs]
    for r, m in zip(runs[1:], got[1:], strict=True):
        assert all(abs(m[k] - got[0][k]) <= 1e-9 for k in m), (
            f"rank 0 reported {got[0]}, rank {r['rank']} reported {m}. Every rank must return the whole set's "
            "metrics, so at least one of them returned numbers it did not combine from all ranks: its own shard's, "
            "or a result only some ranks receive (dist.reduce leaves the sum on its dst rank alone). Combine the "
            "counts with a collective that hands every rank the result (dist.all_reduce of [correct, total])."
        )
