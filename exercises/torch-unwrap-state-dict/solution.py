"""Reference solution: strip exactly one leading 'module.' into a new ordered dict."""

from collections import OrderedDict

PREFIX = "module."


def unwrap_state_dict(state: dict) -> dict:
    unwrapped = OrderedDict()
    for key, value in state.items():
        if key.startswith(PREFIX):
            key = key[len(PREFIX):]
        unwrapped[key] = value
    return unwrapped
