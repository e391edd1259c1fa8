"""Turn a checkpoint saved from nn.DataParallel / DDP into one a plain model can load."""

from collections import OrderedDict

PREFIX = "module."


def unwrap_state_dict(state: dict) -> dict:
    """Return a new state dict with one leading ``"module."`` removed from every key that starts with it.

    Keeps the container type (dict or OrderedDict) and, when present, carries over a *new*
    ``_metadata`` table with the same renaming, so the caller's checkpoint is never modified.
    """
    out = OrderedDict() if isinstance(state, OrderedDict) else {}
    for key in list(state.keys()):
        new_key = key[len(PREFIX):] if key.startswith(PREFIX) else key
        out[new_key] = state[key]

    meta = getattr(state, "_metadata", None)
    if meta is not None and isinstance(out, OrderedDict):
        new_meta = OrderedDict()
        for mkey, mval in meta.items():
            if mkey == PREFIX[:-1]:          # "module" -> the plain model's root ""
                new_meta[""] = mval
            elif mkey.startswith(PREFIX):
                new_meta[mkey[len(PREFIX):]] = mval
            elif mkey not in new_meta:
                new_meta[mkey] = mval
        out._metadata = new_meta
    return out
