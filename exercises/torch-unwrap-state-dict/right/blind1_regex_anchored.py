"""Turn a checkpoint saved from nn.DataParallel / DDP into one a plain model can load."""

import re

PREFIX = "module."
_LEADING = re.compile("^" + re.escape(PREFIX))


def unwrap_state_dict(state: dict) -> dict:
    """Return a new state dict with one leading ``"module."`` removed from every key that starts with it."""
    result = {}
    for key, value in state.items():
        # "^" only matches at the very start, and count=1 makes "only once" explicit
        result[_LEADING.sub("", key, count=1)] = value
    return result
