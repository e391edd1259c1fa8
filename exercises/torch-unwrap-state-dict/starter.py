"""Turn a checkpoint saved from nn.DataParallel / DDP into one a plain model can load."""

PREFIX = "module."


def unwrap_state_dict(state: dict) -> dict:
    """Return a new state dict with one leading ``"module."`` removed from every key that starts with it.

    - Keys that do not start with ``"module."`` are kept exactly as they are, so a plain
      (never wrapped) checkpoint comes back unchanged.
    - Only ONE leading ``"module."`` is removed: ``"module.module.weight"`` -> ``"module.weight"``.
      ``"module."`` anywhere else in a key (``"submodule.weight"``) is left alone.
    - The values (tensors) are the same objects as in ``state``; the order of keys is kept.
    - ``state`` itself is not changed: build and return a new dict.
    """
    # TODO: build a new dict; for each key, strip PREFIX only if the key starts with it.
    raise NotImplementedError("unwrap_state_dict is not written yet")
