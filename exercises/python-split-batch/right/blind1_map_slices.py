"""Split a batch into per-device shards, the way nn.DataParallel's scatter does."""
from math import ceil


def split_batch(batch: list, n_devices: int) -> list[list]:
    """Split ``batch`` into contiguous shards, one per device, following torch.chunk's rule."""
    if n_devices < 1:
        raise ValueError(f"expected n_devices >= 1, got {n_devices}")
    if not batch:
        return [[] for _ in range(n_devices)]
    size = ceil(len(batch) / n_devices)
    starts = range(0, len(batch), size)
    shards = list(map(lambda s: batch[s:s + size], starts))
    print(f"[split_batch] {len(batch)} items / {n_devices} devices -> "
          f"{len(shards)} shards of sizes {[len(x) for x in shards]}")
    return shards
