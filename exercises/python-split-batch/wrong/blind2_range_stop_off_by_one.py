"""Split a batch into per-device shards, the way nn.DataParallel's scatter does."""


def split_batch(batch: list, n_devices: int) -> list[list]:
    """Split ``batch`` into contiguous shards, one per device, following torch.chunk's rule."""
    if n_devices < 1:
        raise ValueError("n_devices must be at least 1")
    if not batch:
        return [[] for _ in range(n_devices)]
    size = -(-len(batch) // n_devices)
    shards = []
    for start in range(0, len(batch) - 1, size):
        shards.append(batch[start:start + size])
    return shards
