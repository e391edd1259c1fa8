"""Known-wrong: keeps stripping while the key still starts with 'module.'."""


def unwrap_state_dict(state: dict) -> dict:
    unwrapped = {}
    for key, value in state.items():
        while key.startswith("module."):
            key = key[len("module."):]
        unwrapped[key] = value
    return unwrapped
