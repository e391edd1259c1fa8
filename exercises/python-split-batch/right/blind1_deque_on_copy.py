"""Split a batch into per-device shards, the way nn.DataParallel's scatter does."""

from collections import deque


def split_batch(batch: list, n_devices: int) -> list[list]:
    """Split ``batch`` into contiguous shards, one per device, following torch.chunk's rule."""
    if not n_devices >= 1:
        raise ValueError(f"bad n_devices: {n_devices}")
    if not batch:
        return [[] for _ in range(n_devices)]

    q, r = divmod(len(batch), n_devices)
    size = q + (1 if r else 0)          # ceiling division

    pending = deque(batch)              # a copy: popping from it leaves `batch` alone
    shards = []
    while pending:
        shard = []
        for _ in range(min(size, len(pending))):
            shard.append(pending.popleft())
        shards.append(shard)
    return shards
