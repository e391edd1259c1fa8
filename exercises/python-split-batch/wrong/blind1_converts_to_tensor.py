"""Split a batch into per-device shards, the way nn.DataParallel's scatter does."""

import torch


def split_batch(batch: list, n_devices: int) -> list[list]:
    """Split ``batch`` into contiguous shards, one per device."""
    if n_devices < 1:
        raise ValueError("n_devices must be >= 1")
    # let torch.chunk do the work so the rule is exactly the same as DataParallel's
    return [chunk.tolist() for chunk in torch.tensor(batch).chunk(n_devices)]
