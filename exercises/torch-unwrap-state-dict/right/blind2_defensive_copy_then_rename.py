"""Turn a checkpoint saved from nn.DataParallel / DDP into one a plain model can load."""

from collections import OrderedDict

PREFIX = "module."


def unwrap_state_dict(state: dict) -> dict:
    n = len(PREFIX)
    items = list(state.items())              # snapshot; `state` itself is never written to
    renamed = [(k[n:] if k[:n] == PREFIX else k, v) for k, v in items]
    return OrderedDict(renamed)
