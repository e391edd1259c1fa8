"""Probes for torch-lr-scaling: build a real torch optimizer next to the learner's code and report what
set_lr did to it, as data. Observations only; the hidden tests decide what is right."""

import torch


def set_lr_groups(submission, lr: float) -> dict:
    """Two parameter groups (lr 0.1 and 0.01), call set_lr(opt, lr), then take one SGD step with gradient 1.

    Returns each group's "lr" afterwards, what set_lr returned (its type name), and each parameter's value
    after the step (both start at 1.0, so a group stepped with learning rate r ends at 1 - r).
    """
    a = torch.nn.Parameter(torch.ones(1))
    b = torch.nn.Parameter(torch.ones(1))
    opt = torch.optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.01}], lr=0.1)
    returned = submission.set_lr(opt, lr)
    a.grad = torch.ones(1)
    b.grad = torch.ones(1)
    opt.step()
    return {
        "lrs": [g["lr"] for g in opt.param_groups],
        "returned": type(returned).__name__,
        "after_step": [float(a.detach()[0]), float(b.detach()[0])],
    }
