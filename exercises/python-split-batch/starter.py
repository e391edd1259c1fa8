"""Split a batch into per-device shards, the way nn.DataParallel's scatter does."""


def split_batch(batch: list, n_devices: int) -> list[list]:
    """Split ``batch`` into contiguous shards, one per device, following torch.chunk's rule.

    - The shard size is ceil(len(batch) / n_devices); every shard has that size except
      possibly the last, which holds whatever is left. This can give FEWER than
      n_devices shards (10 items over 4 devices -> sizes 3, 3, 3, 1; 2 items over 4 -> 1, 1).
    - An empty batch gives n_devices empty shards.
    - Shards are new lists (each its own list, never ``batch`` itself), in order; joined together they
      equal ``batch``.
    - ``batch`` itself is not changed.
    - Raise ValueError if n_devices < 1 (even for an empty batch).
    """
    # TODO: validate n_devices, work out the shard size, then slice the batch.
    raise NotImplementedError("split_batch is not written yet")
