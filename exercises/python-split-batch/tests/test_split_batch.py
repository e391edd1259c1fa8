"""Hidden tests for split_batch: each test checks one part of the contract and explains a failure.

They run in the judge: `submission.split_batch(...)` runs in the learner's process and returns a copy of
the result as data; `probe(...)` runs a function of probes.py there (for what only that process can see).
"""

import pytest


def _split(submission, batch, n):
    """Call split_batch and turn an unexpected exception into feedback instead of a bare traceback."""
    try:
        return submission.split_batch(batch, n)
    except Exception as exc:  # the learner's bug, reported as a test failure
        pytest.fail(
            f"split_batch({batch!r}, {n}) raised {type(exc).__name__}: {exc}. "
            "For a valid n_devices (>= 1) it should return the list of shards."
        )


def _sizes(shards):
    return [len(s) for s in shards]


def test_even_split(submission):
    got = _split(submission, list(range(6)), 3)
    assert isinstance(got, list) and all(isinstance(s, list) for s in got), (
        f"split_batch(list(range(6)), 3) returned {got!r}; return a list of lists (one list per shard)."
    )
    assert got == [[0, 1], [2, 3], [4, 5]], (
        f"split_batch(list(range(6)), 3) returned {got!r}; each device gets one contiguous block of the "
        "batch, in order: expected [[0, 1], [2, 3], [4, 5]]. Slice blocks (batch[start:start + size]), "
        "do not deal items out one by one."
    )
    got = _split(submission, list("abcdefgh"), 2)
    assert got == [list("abcd"), list("efgh")], (
        f"split_batch(list('abcdefgh'), 2) returned {got!r}; expected [['a','b','c','d'], ['e','f','g','h']]."
    )


def test_uneven_split_follows_chunk_rule(submission):
    cases = [
        (10, 3, [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]),
        (10, 4, [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]),
        (11, 4, [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10]]),
        (7, 2, [[0, 1, 2, 3], [4, 5, 6]]),
    ]
    for n_items, n_dev, want in cases:
        got = _split(submission, list(range(n_items)), n_dev)
        assert got == want, (
            f"split_batch(list(range({n_items})), {n_dev}) returned sizes {_sizes(got)} ({got!r}); "
            f"torch.chunk uses shard size ceil({n_items}/{n_dev}) = {-(-n_items // n_dev)} for every shard "
            f"except the last, which takes what is left: expected sizes {_sizes(want)}. "
            "Balanced sizes like [4, 3, 3] and floor-sized shards that drop the leftovers are both wrong here."
        )


def test_fewer_shards_than_devices(submission):
    cases = [
        (2, 4, [[0], [1]]),
        (6, 4, [[0, 1], [2, 3], [4, 5]]),
        (3, 5, [[0], [1], [2]]),
        (1, 8, [[0]]),
    ]
    for n_items, n_dev, want in cases:
        got = _split(submission, list(range(n_items)), n_dev)
        assert got == want, (
            f"split_batch(list(range({n_items})), {n_dev}) returned {got!r}; expected {want!r}. "
            f"With shard size ceil({n_items}/{n_dev}) = {-(-n_items // n_dev)} the items run out after "
            f"{len(want)} shard(s), so only {len(want)} device(s) get work (torch.chunk returns fewer chunks "
            "and DataParallel only uses that many devices). Do not pad with empty shards."
        )


def test_shards_keep_every_item_in_order(submission):
    batches = [
        [f"img{i}" for i in range(17)],
        [{"id": i} for i in range(9)],
        [3.5, -1, "x", None, (1, 2)],
        list(range(100)),
    ]
    for batch in batches:
        for n_dev in (1, 2, 3, 4, 7, 16, 200):
            got = _split(submission, list(batch), n_dev)
            joined = [item for shard in got for item in shard]
            assert joined == batch, (
                f"split_batch(<{len(batch)} items>, {n_dev}): joining the shards gives {len(joined)} items "
                f"{joined[:8]!r}... but the batch was {batch[:8]!r}...; every item must land in exactly one "
                "shard, and shards must be contiguous blocks in the original order (nothing dropped or reordered)."
            )
            assert got and all(len(s) > 0 for s in got), (
                f"split_batch(<{len(batch)} items>, {n_dev}) returned shard sizes {_sizes(got)[:20]}"
                f"{'...' if len(got) > 20 else ''}; "
                "a non-empty batch never produces an empty shard under torch.chunk's rule."
            )
            assert len(got) <= n_dev, (
                f"split_batch(<{len(batch)} items>, {n_dev}) returned {len(got)} shards; "
                f"there can never be more shards than devices ({n_dev})."
            )


def test_input_not_mutated(probe):
    # Mutation and identity only exist inside the learner's process: a probe watches them there.
    try:
        seen = probe("split_and_watch_input", list(range(10)), 3)
    except Exception as exc:  # the learner's bug, reported as a test failure
        pytest.fail(f"split_batch(list(range(10)), 3) raised {type(exc).__name__}: {exc}.")
    batch, before = seen["input_after"], list(range(10))
    assert batch == before, (
        f"after split_batch(batch, 3) the caller's batch is {batch!r} instead of {before!r}; "
        "do not pop, remove or reorder items of the input list: slice it (slices are new lists)."
    )
    assert not seen["returned_input"], (
        "split_batch returned the input list itself as a shard; return new lists so that changing "
        "a shard later cannot change the caller's batch (batch[a:b] makes a copy)."
    )


def test_rejects_fewer_than_one_device(submission):
    for n_dev in (0, -1, -4):
        try:
            result = submission.split_batch(list(range(10)), n_dev)
        except ValueError:
            continue
        except Exception as exc:
            pytest.fail(
                f"split_batch(list(range(10)), {n_dev}) raised {type(exc).__name__} ({exc}); check "
                "n_devices first and raise ValueError with a clear message when it is < 1."
            )
        pytest.fail(
            f"split_batch(list(range(10)), {n_dev}) returned {result!r}; with fewer than one device there is "
            "nowhere to send the data, so raise ValueError (check `if n_devices < 1` before splitting)."
        )


def test_empty_batch(submission):
    got = _split(submission, [], 3)
    assert got == [[], [], []], (
        f"split_batch([], 3) returned {got!r}; expected [[], [], []]. torch.arange(0).chunk(3) gives three "
        "empty chunks, so an empty batch gives n_devices empty shards. (Careful: the shard size is 0 here, "
        "so a range(0, len(batch), size) loop needs a special case.)"
    )
    got = _split(submission, [], 1)
    assert got == [[]], f"split_batch([], 1) returned {got!r}; expected [[]] (one empty shard)."
