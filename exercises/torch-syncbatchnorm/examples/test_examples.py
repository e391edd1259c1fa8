"""Visible examples: the conversion of the prompt's model. The hidden tests check more: nested layers of every
kind, the trained statistics, eval outputs, the training/eval mode, a bare BatchNorm layer, and the order of
convert and wrap."""


def test_example_top_level_bn_converted(probe):
    seen = probe("convert")
    assert seen["types"] is not None, f"convert_bn returned {seen['returned']}, not a module"
    assert seen["types"]["bn"] == "SyncBatchNorm", f"model.bn is a {seen['types']['bn']} after convert_bn"


def test_example_prepare_calls_wrap(probe):
    seen = probe("prepare")
    error = seen["error"]
    assert error is None, f"prepare(model, wrap) raised {error and error['type']}: {error and error['message']}"
    assert seen["calls"] == 1, f"prepare called wrap {seen['calls']} times, expected once"
