"""Split a batch into per-device shards, the way nn.DataParallel's scatter does."""


def split_batch(batch: list, n_devices: int) -> list[list]:
    """Split ``batch`` into contiguous shards, one per device, following torch.chunk's rule."""
    if n_devices < 1:
        raise ValueError("n_devices must be at least 1")
    size = -(-len(batch) // n_devices)
    # one shard per device; devices past the end of the batch get an empty shard
    return [batch[i * size:(i + 1) * size] for i in range(n_devices)]
