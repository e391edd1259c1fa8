"""Split a batch into per-device shards, the way nn.DataParallel's scatter does."""

def split_batch(batch: list, n_devices: int) -> list[list]:
    """Split ``batch`` into contiguous shards, one per device."""
    if n_devices < 1:
        raise ValueError("n_devices must be >= 1")
    if not batch:
        return [[]] * n_devices
    size = -(-len(batch) // n_devices)
    return [batch[i:i + size] for i in range(0, len(batch), size)]
