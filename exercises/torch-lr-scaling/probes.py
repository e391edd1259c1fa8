"""Probes for torch-lr-scaling: build a real torch optimizer next to the learner's code and report what
set_lr did to it, as data. Observations only; the hidden tests decide what is right."""

import torch


def _number(value):
    """A learning rate as data: the number itself, or its type's name when it is not a plain number."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return type(value).__name__


def set_lr_groups(submission, lr: float) -> dict:
    """Two parameter groups (lr 0.1 and 0.01), call set_lr(opt, lr), then take one SGD step with gradient 1.

    Returns each group's "lr" afterwards (a number, or the type's name of what is there), the keys that appeared
    in the groups and the public attributes that appeared on the optimizer during set_lr, optimizer.defaults["lr"]
    afterwards, what set_lr returned (its type name, and whether it is the optimizer itself), and each parameter's
    value after the step (both start at 1.0, so a group stepped with learning rate r ends at 1 - r), or the
    exception the step raised.
    """
    a = torch.nn.Parameter(torch.ones(1))
    b = torch.nn.Parameter(torch.ones(1))
    opt = torch.optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.01}], lr=0.1)
    attributes = set(vars(opt))
    keys = [set(g) for g in opt.param_groups]
    returned = submission.set_lr(opt, lr)
    groups = opt.param_groups if isinstance(opt.param_groups, list) else []
    seen = {
        "lrs": [_number(g.get("lr")) if isinstance(g, dict) else type(g).__name__ for g in groups],
        "new_keys": sorted(
            {str(k)[:40] for g, old in zip(groups, keys, strict=False) if isinstance(g, dict) for k in set(g) - old}
        ),
        "new_attributes": sorted(str(n)[:40] for n in set(vars(opt)) - attributes if not str(n).startswith("_")),
        "defaults_lr": _number(opt.defaults.get("lr")) if isinstance(opt.defaults, dict) else None,
        "returned": type(returned).__name__,
        "returned_optimizer": returned is opt,
        "after_step": None,
        "step_error": None,
    }
    a.grad = torch.ones(1)
    b.grad = torch.ones(1)
    try:
        opt.step()
    except Exception as exc:  # reported as data: the test words it
        seen["step_error"] = {"type": type(exc).__name__, "message": str(exc)[:2000]}
        return seen
    seen["after_step"] = [float(a.detach()[0]), float(b.detach()[0])]
    return seen
