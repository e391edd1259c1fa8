"""Alternative correct solution: str.removeprefix (Python 3.9+) in a dict comprehension."""


def unwrap_state_dict(state: dict) -> dict:
    return {key.removeprefix("module."): value for key, value in state.items()}
