"""Hidden tests for unwrap_state_dict, using real nn.DataParallel checkpoints (DataParallel wraps on CPU too).

They run in the judge. `probe("unwrap", name)` builds the named checkpoint (see probes.py) in the
learner's process, calls unwrap_state_dict there and sends back data: the returned dict (tensors as
tensors), which input tensor each value is, and what became of the input. The judge builds the same
seeded models itself to know what the answer must be.

Messages name a cause only from what was observed: each wrong key is compared with what the classic
mistakes (str.replace, str.lstrip, cutting 7 characters unchecked, ...) would have made of it, and every
mistake that gives exactly that key is named, as a candidate.
"""

from typing import NoReturn

import torch
from probes import Net, Outer, mixed, mixed_plain_first, sequential, trained_wrapped_net
from runner import feedback
from torch import nn

PREFIX = "module."
FIX = (
    "Decide for each key on its own: key[len('module.'):] if key.startswith('module.') else key "
    "(or key.removeprefix('module.'))."
)


def _strip_all(key: str) -> str:
    while key.startswith(PREFIX):
        key = key[len(PREFIX) :]
    return key


# What a wrong key can be an observation of: what was done to it, and the key that gives.
RENAMES = (
    ("its leading 'module.' was kept", lambda k: k),
    ("every leading 'module.' was removed, not just the first one", _strip_all),
    (
        "'module.' was removed everywhere in the name, as key.replace('module.', '') does",
        lambda k: k.replace(PREFIX, ""),
    ),
    (
        "the first 'module.' found anywhere in the name was removed, not only one at the very start (as "
        "str.replace with a count of 1 or a regular expression without '^' do)",
        lambda k: k.replace(PREFIX, "", 1),
    ),
    (
        "everything up to and including a 'module.' inside the name was cut, although the name does not start "
        "with it: a test such as `'module.' in key` also matches 'submodule.', and key.split('module.', 1)[1] (or "
        "partition) then drops the start of the name",
        lambda k: k.split(PREFIX, 1)[1] if PREFIX in k and not k.startswith(PREFIX) else None,
    ),
    (
        "its first 7 characters were cut although it does not start with 'module.' (dot included)",
        lambda k: k[len(PREFIX) :] if not k.startswith("module") else None,
    ),
    (
        "its first 7 characters were cut although it starts with 'module' but not with 'module.' (the dot is part "
        "of the prefix): one of these: a startswith('module') test without the dot matched it; or key[7:] was "
        "applied without any startswith test",
        lambda k: k[len(PREFIX) :] if k.startswith("module") and not k.startswith(PREFIX) else None,
    ),
    ("'module' was removed without its dot", lambda k: k.removeprefix("module")),
    (
        "its leading letters m, o, d, u, l, e and dots were stripped, as key.lstrip('module.') does (lstrip "
        "strips a set of characters, not a prefix)",
        lambda k: k.lstrip(PREFIX),
    ),
)


def _fail_raised(what: str, exc: Exception) -> NoReturn:
    """Fail with what the learner's code raised, worded by runner.feedback."""
    type_name = getattr(exc, "type_name", type(exc).__name__)
    message = str(exc.args[0]) if exc.args else ""
    got = feedback.raised(f"unwrap_state_dict({what})", type_name, message)
    line = getattr(exc, "line", None)
    text = got.message[:-1] if got.message.endswith(".") else got.message
    feedback.fail(text + (f" (your code, line {line})." if line else "."), details=got.details)


def _unwrap(probe, checkpoint, what):
    try:
        seen = probe("unwrap", checkpoint)
    except Exception as exc:  # the learner's bug, reported as feedback
        _fail_raised(what, exc)
    if seen["type"] == "NoneType":
        feedback.fail(
            f"unwrap_state_dict({what}) returned None, not a dict: does the function end without `return` "
            "(a Python function without one returns None)? Return the new dict you built."
        )
    if not seen["is_dict"]:
        feedback.fail(
            f"unwrap_state_dict({what}) returned a {seen['type']}; return a dict (or OrderedDict) mapping "
            "parameter names to tensors, as model.state_dict() does."
        )
    return seen


def _quote(keys, most: int = 6) -> str:
    keys = list(keys)
    shown = ", ".join(repr(k) for k in keys[:most])
    return f"[{shown}{', ...' if len(keys) > most else ''}]"


def _fates(input_keys, seen) -> dict:
    """For each input key, the key its tensor came back under (by object identity; by position for copies)."""
    keys, origins = seen["keys"], seen["same_tensor_as"]
    fate = {}
    for key, origin in zip(keys, origins, strict=True):
        if origin is not None and origin not in fate:
            fate[origin] = key
    if len(keys) == len(input_keys):  # values that are new objects: the key at the same place
        for old, (new, origin) in zip(input_keys, zip(keys, origins, strict=True), strict=True):
            if origin is None:
                fate.setdefault(old, new)
    return fate


def _order_problem(input_keys, got, want) -> str | None:
    """The sentence for keys that are right but come back in another order (None if that is not the case)."""
    if got == want or sorted(got) != sorted(want):
        return None
    renamed_last = [k for k in input_keys if not k.startswith(PREFIX)] + [
        k[len(PREFIX) :] for k in input_keys if k.startswith(PREFIX)
    ]
    hows = []
    if got in (sorted(want), [k.removeprefix(PREFIX) for k in sorted(input_keys)]):
        hows.append("the keys were sorted alphabetically (sorted(), before or after renaming)")
    if got == renamed_last:
        hows.append(
            "the renamed keys were popped and inserted again, which moves them behind the others (torch's "
            "consume_prefix_in_state_dict_if_present renames that way, on a copy too)"
        )
    if not hows:
        hows.append("something changed the order: going through a set, sorting, or removing and re-inserting keys")
    how = hows[0] if len(hows) == 1 else "one of these: " + "; or ".join(hows)
    return (
        f"the keys are right but in another order: you returned {_quote(got, 13)}, expected {_quote(want, 13)}; "
        f"{how}. Keep the input's order: build the new dict in one pass over state.items(), adding each key "
        "as you meet it."
    )


def _key_problems(input_keys, seen) -> str | None:
    """What went wrong with the keys, key by key, from the observation (None when they are all right)."""
    got = seen["keys"]
    want = [k.removeprefix(PREFIX) for k in input_keys]
    if got == want:
        return None
    order = _order_problem(input_keys, got, want)
    if order:
        return order
    fate = _fates(input_keys, seen)
    groups: dict[tuple[str, ...], list[str]] = {}
    for old, expected in zip(input_keys, want, strict=True):
        new = fate.get(old)
        if new == expected:
            continue
        if new is None:
            causes = (
                "missing from your result: left out (an `if` at the end of a comprehension drops the keys it "
                "rejects), or replaced by another key renamed to the same name",
            )
            groups.setdefault(causes, []).append(f"{old!r}")
            continue
        causes = tuple(said for said, rename in RENAMES if rename(old) == new and rename(old) != expected)
        causes = causes or (f"it should have become {expected!r}",)
        groups.setdefault(causes, []).append(f"{old!r} -> {new!r} (expected {expected!r})")
    if not groups:  # every input key is right, yet the dict differs: keys the input did not have
        extra = [k for k in got if k not in want]
        return f"your result has keys the checkpoint did not lead to: {_quote(extra)}; expected exactly {_quote(want)}."
    lines = []
    for causes, keys in list(groups.items())[:3]:
        listed = "; ".join(keys[:3]) + ("; ..." if len(keys) > 3 else "")
        said = causes[0] if len(causes) == 1 else "one of these: " + "; or ".join(causes)
        lines.append(f"{listed}: {said}")
    return "keys came back wrong (checkpoint key -> your key): " + ". ".join(lines) + "."


def _fail_keys(lead: str, input_keys, seen, extra: str = "") -> None:
    problem = _key_problems(input_keys, seen)
    if problem:
        if problem.startswith("the keys are right but in another order"):
            feedback.fail(f"{lead}: {problem}")
        feedback.fail(f"{lead}: {problem}{(' ' + extra) if extra else ''} {FIX}")


def _load_problem(got: dict, model: nn.Module) -> str | None:
    """Why model.load_state_dict(got, strict=True) cannot work, from the dict itself (None: it should load)."""
    want = model.state_dict()
    missing = [k for k in want if k not in got]
    unexpected = [k for k in got if k not in want]
    if missing or unexpected:
        return (
            f"unexpected keys {_quote(unexpected, 4)}, missing keys {_quote(missing, 4)}. Every key must match the "
            f"plain model's names exactly; the plain model expects {_quote(want, 13)}"
        )
    for key, value in got.items():
        if not isinstance(value, torch.Tensor):
            return (
                f"{key!r} maps to a {type(value).__name__}, not a tensor; load_state_dict copies from tensors, so "
                "pass the input's tensors through as they are"
            )
        if tuple(value.shape) != tuple(want[key].shape):
            return (
                f"{key!r} holds a tensor of shape {tuple(value.shape)} but the model's {key!r} has shape "
                f"{tuple(want[key].shape)}: another key's tensor ended up under this name, or the tensor was reshaped"
            )
    return None


def _same(a, b) -> bool:
    return (
        isinstance(a, torch.Tensor)
        and a.dtype == b.dtype
        and tuple(a.shape) == tuple(b.shape)
        and bool(torch.equal(a, b))
    )


def _value_problem(value, original: torch.Tensor, inputs: dict) -> str | None:
    """What is wrong with the value that stands where ``original`` should (None: equal to it)."""
    if _same(value, original):
        return None
    for key, other in inputs.items():
        if other is not original and _same(value, other):
            return f"equals the tensor that was under {key!r}: each value must stay with its own key"
    return f"is {_what_became(original, value)}"


def test_strips_dataparallel_prefix(probe):
    state_keys = list(nn.DataParallel(sequential()).state_dict().keys())
    seen = _unwrap(probe, "wrapped_sequential", "nn.DataParallel(nn.Sequential(...)).state_dict()")
    _fail_keys(
        f"for a DataParallel checkpoint with keys {_quote(state_keys)}",
        state_keys,
        seen,
        extra=(
            "nn.DataParallel stores the real model as its `.module` attribute, so every key starts with "
            "'module.': remove that one leading 'module.'."
        ),
    )


def test_loads_into_plain_model_strict(probe):
    state_keys = list(trained_wrapped_net().state_dict().keys())
    seen = _unwrap(probe, "wrapped_net", "a DataParallel checkpoint")
    got = seen["result"]
    fresh = Net(seed=99)
    lead = "plain_model.load_state_dict(unwrap_state_dict(checkpoint), strict=True) fails"
    problem = _load_problem(got, fresh)
    if problem:
        why = _key_problems(state_keys, seen)
        why = f" {why[:1].upper()}{why[1:]}" if why and problem.startswith("unexpected keys") else ""
        feedback.fail(f"{lead}: {problem}.{why}")
    try:
        fresh.load_state_dict(got, strict=True)
    except (RuntimeError, TypeError, AttributeError, ValueError) as exc:
        feedback.fail(
            f"{lead}, although the keys and shapes match the plain model's: a value in your dict is not "
            "what load_state_dict can copy from. Pass the input's tensors through unchanged.",
            details=str(exc),
        )
    wrapped = trained_wrapped_net()
    wrapped.eval()
    fresh.eval()
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want_out = wrapped(x)
        got_out = fresh(x)
    if not torch.allclose(got_out, want_out):
        feedback.fail(
            "the plain model loaded from your unwrapped checkpoint gives different outputs than the wrapped "
            f"model (largest difference {float((got_out - want_out).abs().max()):.2g}): some tensor is under "
            "another key's name or has other values. Each tensor must stay under its own name, BatchNorm "
            "buffers such as norm.running_mean included."
        )


def test_names_containing_module_survive(probe):
    state_keys = list(trained_wrapped_net().state_dict().keys())
    seen = _unwrap(probe, "wrapped_net", "DataParallel(Net()).state_dict()")
    _fail_keys(
        "for DataParallel(Net()).state_dict(), whose model has layers named 'submodule', 'module_list' and 'decoder'",
        state_keys,
        seen,
        extra=(
            "Only a 'module.' at the very start of a key comes from DataParallel; 'module' elsewhere in a "
            "name belongs to the model."
        ),
    )


def test_plain_checkpoint_unchanged(probe):
    state = Net().state_dict()
    seen = _unwrap(probe, "plain_net", "Net().state_dict() (never wrapped)")
    _fail_keys(
        "a checkpoint from an unwrapped model must come back unchanged (keys that do not start with 'module.' "
        "are left alone, so the same function works for wrapped and plain checkpoints)",
        list(state),
        seen,
    )
    got = seen["result"]
    for key in state:
        problem = _value_problem(got[key], state[key], state)
        if problem:
            feedback.fail(f"for a plain checkpoint, the value under {key!r} {problem}; keep the values as they were.")
    empty = _unwrap(probe, "empty", "{}")["result"]
    if empty:
        feedback.fail(f"unwrap_state_dict({{}}) returned a dict with keys {_quote(empty)}; expected an empty dict.")


def test_strips_only_one_prefix(probe):
    state_keys = list(nn.DataParallel(Outer(seed=4)).state_dict().keys())
    seen = _unwrap(probe, "wrapped_outer", "DataParallel(Outer()).state_dict()")
    fate = _fates(state_keys, seen)
    inner = [k for k in state_keys if k.startswith(PREFIX + PREFIX) and fate.get(k) != k[len(PREFIX) :]]
    _fail_keys(
        f"for DataParallel(Outer()).state_dict(), keys {_quote(state_keys)}",
        state_keys,
        seen,
        extra=(
            "The model has a child literally named 'module', so DataParallel saved 'module.module.weight'. "
            "Remove exactly ONE leading 'module.' (the one DataParallel added); the second one is a real name "
            "inside the model."
            if inner
            else ""
        ),
    )
    problem = _load_problem(seen["result"], Outer(seed=5))
    if problem:
        feedback.fail(f"the result for DataParallel(Outer()).state_dict() does not load into Outer(): {problem}.")


def _first_key_decides(probe) -> str | None:
    """The sentence for a submission that treats every key as its first key is (None: not what it does)."""
    results = {}
    for name, build in (("mixed", mixed), ("mixed_plain_first", mixed_plain_first)):
        keys = list(build())
        try:
            seen = probe("unwrap", name)
        except Exception:
            return None
        if not seen["is_dict"]:
            return None
        results[name] = (keys, seen["keys"])
    (prefixed_first, got_prefixed), (plain_first, got_plain) = results["mixed"], results["mixed_plain_first"]
    if got_plain != plain_first:  # with a plain key first, nothing was stripped: the decision came from it
        return None
    right = [k.removeprefix(PREFIX) for k in prefixed_first]
    if got_prefixed == right:
        what = "stripped 'module.' correctly"
    elif got_prefixed == [k[len(PREFIX) :] for k in prefixed_first]:
        what = f"cut 7 characters off every key, 'b' included: you returned {_quote(got_prefixed)}"
    else:
        return None
    return (
        f"for keys {_quote(prefixed_first)} (a prefixed key first) you {what}, but for the same keys with 'b' "
        f"first, {_quote(plain_first)}, you returned them unchanged, 'module.' kept on 'module.a' and 'module.c'. "
        f"Expected {_quote(right)} both times. Your code decides from the first key what to do with all of them; "
        "whether a key loses its 'module.' must depend on that key alone (one dict may hold keys with and without "
        "the prefix)."
    )


def test_mixed_keys_each_on_its_own(probe):
    first_key = _first_key_decides(probe)
    if first_key:
        feedback.fail(first_key)
    for name, build in (("mixed", mixed), ("mixed_plain_first", mixed_plain_first)):
        state = build()
        input_keys = list(state)
        seen = _unwrap(probe, name, f"{{{', '.join(f'{k!r}: ...' for k in input_keys)}}}")
        _fail_keys(f"for a dict with keys {_quote(input_keys)}", input_keys, seen)
        want = [k.removeprefix(PREFIX) for k in input_keys]
        result = seen["result"]
        for old, new in zip(input_keys, want, strict=True):
            problem = _value_problem(result[new], state[old], state)
            if problem:
                feedback.fail(
                    f"for a dict with keys {_quote(input_keys)}, the value under {new!r} (was {old!r}) {problem}."
                )


def test_input_not_mutated(probe):
    for what, checkpoint, state in (
        ("a DataParallel checkpoint", "wrapped_net", trained_wrapped_net().state_dict()),
        ("a plain checkpoint", "plain_net", Net().state_dict()),
    ):
        before_keys = list(state.keys())
        seen = _unwrap(probe, checkpoint, what)
        after_keys = seen["input_keys_after"]
        if after_keys != before_keys:
            feedback.fail(
                f"after unwrap_state_dict({what}) the caller's dict has keys {_quote(after_keys, 4)} instead of "
                f"{_quote(before_keys, 4)}: do not rename keys in place (pop, del or assignment on the input, "
                "or consume_prefix_in_state_dict_if_present called on it, all rename the caller's keys); build "
                "a new dict and return it."
            )
        if not seen["input_tensors_same_objects"]:
            feedback.fail(
                f"unwrap_state_dict({what}) replaced tensors inside the caller's dict; leave the input untouched."
            )
        if not seen["input_values_unchanged"]:
            feedback.fail(
                f"unwrap_state_dict({what}) changed tensor values inside the caller's dict; never modify them."
            )
        if seen["returned_input"]:
            feedback.fail(
                f"unwrap_state_dict({what}) returned the very same dict object it was given; always return a "
                "new dict (dict(state) at least), so that later changes to one cannot silently change the other."
            )


def _what_became(old: torch.Tensor, new, shares_memory: bool = False) -> str:
    """Describe the value that stands where ``old`` should be (a new object); ``shares_memory``: the probe saw it
    share the input tensor's memory."""
    if not isinstance(new, torch.Tensor):
        return f"a {type(new).__name__}, not a tensor"
    old_dtype, new_dtype = str(old.dtype).removeprefix("torch."), str(new.dtype).removeprefix("torch.")
    if new_dtype != old_dtype:
        return (
            f"a new {new_dtype} tensor instead of the input's {old_dtype} tensor (a cast such as .float() or .to(...))"
        )
    if tuple(new.shape) != tuple(old.shape):
        return f"a tensor of shape {tuple(new.shape)} instead of the input's {tuple(old.shape)}"
    if torch.equal(new, old) and shares_memory:
        return (
            "a new tensor object that shares the input tensor's memory (.detach(), .data and views such as "
            "value[:] or value.view(...) make one; state_dict() values are already detached) instead of the "
            "input's tensor object"
        )
    if torch.equal(new, old):
        return (
            "a new tensor with the same values, a copy (copy.deepcopy, .clone() and torch.tensor(...) make one) "
            "instead of the input's tensor object"
        )
    return "a tensor with other values than the input's"


def test_tensors_preserved(probe):
    state = trained_wrapped_net().state_dict()
    input_keys = list(state)
    seen = _unwrap(probe, "wrapped_net", "a DataParallel checkpoint")
    got, keys, origins = seen["result"], seen["keys"], seen["same_tensor_as"]
    if len(got) != len(state):
        feedback.fail(
            f"the checkpoint had {len(state)} entries but you returned {len(got)}: entries were left out, or "
            "two keys were renamed to the same name and one replaced the other. Keep every entry, buffers like "
            "norm.num_batches_tracked included."
        )
    for key, origin in zip(keys, origins, strict=True):
        if origin is not None and origin.removeprefix(PREFIX) != key and key in [k.removeprefix(PREFIX) for k in state]:
            feedback.fail(
                f"your result's {key!r} holds the tensor that was under {origin!r}; each tensor must stay with "
                "its own key."
            )
    kept = set(o for o in origins if o is not None)
    fate = _fates(input_keys, seen)
    sharing = dict(zip(keys, seen["shares_storage_with"], strict=True))
    for old in input_keys:
        if old in kept:
            continue
        new = fate.get(old)
        if new is None:
            continue  # a key problem: the key tests say what became of it
        feedback.fail(
            f"the value under {new!r} (was {old!r}) is {_what_became(state[old], got[new], sharing.get(new) == old)}. "
            "Rule 3: every value "
            "is the very tensor object of the input; only the keys change, so put the input's values into the "
            "new dict as they are (no copying, detaching, converting or re-creating)."
        )
