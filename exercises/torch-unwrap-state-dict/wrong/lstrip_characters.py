"""Known-wrong: str.lstrip takes a set of characters, not a prefix."""


def unwrap_state_dict(state: dict) -> dict:
    return {key.lstrip("module."): value for key, value in state.items()}
