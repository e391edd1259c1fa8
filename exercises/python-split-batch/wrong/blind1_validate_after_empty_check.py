"""Split a batch into per-device shards, the way nn.DataParallel's scatter does."""

def split_batch(batch: list, n_devices: int) -> list[list]:
    """Split ``batch`` into contiguous shards, one per device."""
    # empty batch: one empty shard per device, like torch.arange(0).chunk(n)
    if len(batch) == 0:
        return [[] for _ in range(n_devices)]
    if n_devices < 1:
        raise ValueError(f"need at least one device, got {n_devices}")
    size = -(-len(batch) // n_devices)
    return [batch[i:i + size] for i in range(0, len(batch), size)]
