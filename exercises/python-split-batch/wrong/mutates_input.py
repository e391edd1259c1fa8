"""Known-wrong: right shards, but it empties the caller's list while building them."""


def split_batch(batch: list, n_devices: int) -> list[list]:
    if n_devices < 1:
        raise ValueError("n_devices must be >= 1")
    if not batch:
        return [[] for _ in range(n_devices)]
    size = -(-len(batch) // n_devices)
    shards = []
    while batch:
        shard = []
        while batch and len(shard) < size:
            shard.append(batch.pop(0))
        shards.append(shard)
    return shards
