"""Known-wrong: correct for valid input, but never checks n_devices."""


def split_batch(batch: list, n_devices: int) -> list[list]:
    if not batch:
        return [[] for _ in range(max(n_devices, 0))]
    size = -(-len(batch) // n_devices)
    if size <= 0:
        return []
    return [batch[start:start + size] for start in range(0, len(batch), size)]
