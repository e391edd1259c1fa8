"""Known-wrong: balanced sizes (first shards get one extra) instead of torch.chunk's ceil-size blocks."""


def split_batch(batch: list, n_devices: int) -> list[list]:
    if n_devices < 1:
        raise ValueError("n_devices must be >= 1")
    base, extra = divmod(len(batch), n_devices)
    shards, start = [], 0
    for i in range(n_devices):
        size = base + (1 if i < extra else 0)
        shards.append(batch[start:start + size])
        start += size
    return shards
