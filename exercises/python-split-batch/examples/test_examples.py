"""Visible examples: run them against your code before submitting. The hidden tests check more cases."""


def test_example_even_split(submission):
    got = submission.split_batch([0, 1, 2, 3, 4, 5], 3)
    assert got == [[0, 1], [2, 3], [4, 5]], (
        f"split_batch([0, 1, 2, 3, 4, 5], 3) returned {got!r}; expected [[0, 1], [2, 3], [4, 5]]: "
        "one contiguous block per device, in order."
    )


def test_example_uneven_split(submission):
    got = submission.split_batch(list(range(10)), 3)
    assert got == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]], (
        f"split_batch(list(range(10)), 3) returned {got!r}; expected [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]: "
        "shard size is ceil(10 / 3) = 4 and the last shard takes the 2 items left over."
    )
