"""Alternative correct solution: PyTorch's own helper, applied to a copy because it works in place."""

from collections import OrderedDict

from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present


def unwrap_state_dict(state: dict) -> dict:
    copied = OrderedDict(state)  # new dict, same tensor objects; the caller's dict stays as it was
    consume_prefix_in_state_dict_if_present(copied, "module.")
    return copied
