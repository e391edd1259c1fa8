"""Alternative correct solution: pull blocks from one iterator with itertools.islice."""

from itertools import islice


def split_batch(batch: list, n_devices: int) -> list[list]:
    if n_devices < 1:
        raise ValueError(f"n_devices={n_devices}: must be >= 1")
    size, extra = divmod(len(batch), n_devices)
    size += 1 if extra else 0
    if size == 0:
        return [[] for _ in range(n_devices)]
    items = iter(batch)
    shards = []
    while shard := list(islice(items, size)):
        shards.append(shard)
    return shards
