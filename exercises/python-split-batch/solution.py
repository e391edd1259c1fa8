"""Reference solution: torch.chunk's rule applied to a Python list."""


def split_batch(batch: list, n_devices: int) -> list[list]:
    if n_devices < 1:
        raise ValueError(f"n_devices must be at least 1, got {n_devices}")
    if not batch:
        return [[] for _ in range(n_devices)]
    size = -(-len(batch) // n_devices)  # ceil(len / n) without floats
    return [batch[start:start + size] for start in range(0, len(batch), size)]
