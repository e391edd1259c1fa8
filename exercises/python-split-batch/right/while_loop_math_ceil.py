"""Alternative correct solution: peel fixed-size blocks off a copy with math.ceil and a loop."""

import math


def split_batch(batch: list, n_devices: int) -> list[list]:
    if n_devices < 1:
        raise ValueError("need at least one device")
    if len(batch) == 0:
        return [list() for _ in range(n_devices)]
    size = math.ceil(len(batch) / n_devices)
    shards = []
    rest = list(batch)
    while rest:
        shards.append(rest[:size])
        rest = rest[size:]
    return shards
