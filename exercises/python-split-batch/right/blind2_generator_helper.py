"""Split a batch into per-device shards, the way nn.DataParallel's scatter does."""

from collections.abc import Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")


def _chunks(seq: Sequence[T], size: int) -> Iterator[list[T]]:
    for start in range(0, len(seq), size):
        yield list(seq[start:start + size])


def split_batch(batch: list, n_devices: int) -> list[list]:
    """Split ``batch`` into contiguous shards following torch.chunk's rule."""
    if n_devices < 1:
        raise ValueError(f"invalid n_devices={n_devices!r}")
    size = -(-len(batch) // n_devices)
    if size == 0:
        return [[] for _ in range(n_devices)]
    return list(_chunks(batch, size))
