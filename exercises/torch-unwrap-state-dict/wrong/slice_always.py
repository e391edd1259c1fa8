"""Known-wrong: drops the first 7 characters of every key, prefixed or not."""


def unwrap_state_dict(state: dict) -> dict:
    return {key[7:]: value for key, value in state.items()}
