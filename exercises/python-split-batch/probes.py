"""Probes: run next to the learner's code and report only data (what came back, what happened to the input)."""


def split_and_watch_input(submission, batch, n_devices):
    """Call split_batch on a list of our own and report the shards and what became of that list."""
    before = list(batch)
    shards = submission.split_batch(batch, n_devices)
    returned_input = isinstance(shards, list) and any(shard is batch for shard in shards)
    return {"shards": shards, "input_before": before, "input_after": list(batch), "returned_input": returned_input}
