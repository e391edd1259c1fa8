"""Known-wrong: renames keys in the caller's dict in place and returns it."""


def unwrap_state_dict(state: dict) -> dict:
    for key in list(state):
        if key.startswith("module."):
            state[key[len("module."):]] = state.pop(key)
    return state
