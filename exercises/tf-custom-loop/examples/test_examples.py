"""A visible check on one device: the loss of one step is the mean cross-entropy of the batch."""

import math

import numpy as np
from probes import data, initial_weights


def test_single_device_loss(probe):
    seen = probe("single", 8, 8, 0.5)
    x, y = data(8)
    kernel, bias = initial_weights()
    z = x.astype("float64") @ kernel + bias
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    want = float(-np.log(p[np.arange(8), y]).mean())
    assert seen["loss"] is not None and math.isclose(seen["loss"], want, rel_tol=1e-5), (
        f"train_step on 8 examples with global_batch_size=8 returned {seen['loss']}; expected {want:.6f}."
    )
