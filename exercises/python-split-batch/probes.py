"""Probes: run next to the learner's code and report only data (what came back, what happened to the input).

The hidden tests decide what is right; these only observe what the judge cannot see from its side: object identity
(is a shard the caller's list, are two shards one list) and what the learner's module imported.
"""

import types


def split_and_watch_input(submission, batch, n_devices):
    """Call split_batch on a list of our own and report the shards, what became of that list, and shard identity.

    ``is_input[i]``: shard i is the caller's list itself. ``same_as[i]``: the index of an earlier shard that is the
    very same object as shard i, or -1.
    """
    before = list(batch)
    shards = submission.split_batch(batch, n_devices)
    is_input, same_as = [], []
    if isinstance(shards, list):
        for i, shard in enumerate(shards):
            is_input.append(shard is batch)
            same_as.append(next((j for j in range(i) if shards[j] is shard), -1))
    return {
        "shards": shards,
        "input_before": before,
        "input_after": list(batch),
        "is_input": is_input,
        "same_as": same_as,
        "returned_input": any(is_input),
    }


def modules_used(submission):
    """The top-level packages the learner's module holds: modules it imported and the homes of names it imported."""
    found = set()
    for value in vars(submission).values():
        if isinstance(value, types.ModuleType):
            found.add(value.__name__.split(".")[0])
        elif callable(value):
            home = getattr(value, "__module__", None)
            if isinstance(home, str) and home and home != submission.__name__:
                found.add(home.split(".")[0])
    return sorted(found)
