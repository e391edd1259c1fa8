"""Split a batch into per-device shards, the way nn.DataParallel's scatter does."""

import logging

log = logging.getLogger(__name__)


def split_batch(batch: list, n_devices: int) -> list[list]:
    """Split ``batch`` into contiguous shards following torch.chunk's rule."""
    if n_devices < 1:
        raise ValueError("n_devices < 1")
    items = list(batch)  # private copy; batch itself is never touched
    if not items:
        log.debug("empty batch -> %d empty shards", n_devices)
        return [[] for _ in range(n_devices)]

    size = (len(items) + n_devices - 1) // n_devices
    shards = []
    for device in range(n_devices):
        shard = items[device * size:(device + 1) * size]
        if not shard:  # this device gets nothing: DataParallel skips it
            log.debug("device %d idle this step", device)
            break
        shards.append(shard)
    log.debug("split %d items into sizes %s", len(items), [len(s) for s in shards])
    return shards
