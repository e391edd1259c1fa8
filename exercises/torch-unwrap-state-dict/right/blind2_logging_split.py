"""Turn a checkpoint saved from nn.DataParallel / DDP into one a plain model can load."""

import logging

PREFIX = "module."

log = logging.getLogger(__name__)


def unwrap_state_dict(state: dict) -> dict:
    out = {}
    stripped = 0
    for key, value in state.items():
        if key.startswith(PREFIX):
            _, key = key.split(".", 1)   # "module.<rest>" -> "<rest>"
            stripped += 1
        if key in out:
            log.warning("duplicate key after unwrapping: %s", key)
        out[key] = value
    log.info("unwrap_state_dict: stripped %d of %d keys", stripped, len(state))
    return out
