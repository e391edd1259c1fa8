"""Known-wrong: replaces 'module.' wherever it appears in the key."""


def unwrap_state_dict(state: dict) -> dict:
    return {key.replace("module.", ""): value for key, value in state.items()}
