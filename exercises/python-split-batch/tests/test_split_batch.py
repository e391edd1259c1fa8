"""Hidden tests for split_batch: each test checks one part of the contract and explains a failure.

They run in the judge: `submission.split_batch(...)` runs in the learner's process and returns a copy of
the result as data; `probe(...)` runs a function of probes.py there (for what only that process can see).
Every message says what was called, what came back and what was expected; it names a cause only where what came
back shows it (shards dealt out round-robin, the last shard missing, empty shards added, balanced sizes...), and
otherwise says what is wrong with the result.
"""

from typing import NoReturn

from runner import feedback
from runner.wire import Opaque, TensorData

TENSOR_LIBRARIES = ("torch", "numpy", "tensorflow", "jax")


# ---------------------------------------------------------------- showing values


def _desc(batch) -> str:
    """How a batch is written in a message: list(range(10)), a short literal, or its first items and length."""
    if batch and batch == list(range(len(batch))):
        return f"list(range({len(batch)}))"
    if len(batch) <= 8:
        return _show(batch)
    return "[" + ", ".join(_show(x) for x in batch[:4]) + f", ...] ({len(batch)} items)"


def _kind(value) -> str:
    """What a value is, in words (never a repr with an object's address)."""
    if value is None:
        return "None"
    if isinstance(value, Opaque):
        return f"a {value.type_name.rsplit('.', 1)[-1]} object"
    if isinstance(value, TensorData):
        return "a NumPy array" if value.framework == "numpy" else f"a {value.framework} tensor"
    return f"a {type(value).__name__}"


def _show(value, items: int = 8) -> str:
    """A short repr for people: nested lists cut after ``items`` entries, objects the wire could not carry named."""
    if isinstance(value, Opaque | TensorData):
        return f"<{_kind(value)}>"
    if isinstance(value, list | tuple):
        inner = [_show(x, items) for x in value[:items]]
        if len(value) > items:
            inner.append(f"... ({len(value)} in all)")
        if isinstance(value, tuple):
            return "(" + ", ".join(inner) + ("," if len(value) == 1 else "") + ")"
        return "[" + ", ".join(inner) + "]"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _items(count: int, word: str = "item") -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def _sizes(shards):
    return [len(s) for s in shards]


def _sizes_text(shards) -> str:
    sizes = _sizes(shards)
    return str(sizes[:20])[:-1] + (", ...]" if len(sizes) > 20 else "]")


# ---------------------------------------------------------------- calling the learner's code


def _chunk(batch, n):
    """torch.chunk's rule on a list: the expected answer."""
    if not batch:
        return [[] for _ in range(n)]
    size = -(-len(batch) // n)
    return [batch[i : i + size] for i in range(0, len(batch), size)]


def _tensor_libraries(probe) -> list[str]:
    try:
        return [m for m in probe("modules_used") if m in TENSOR_LIBRARIES]
    except Exception:  # the observation is only a hint: without it, the message just says less
        return []


def _fail_raised(call: str, exc: Exception, hint: str = "") -> NoReturn:
    """Fail with what the learner's code raised (its own exception, worded by runner.feedback) and a hint."""
    type_name = getattr(exc, "type_name", type(exc).__name__)
    message = str(exc.args[0]) if exc.args else ""
    got = feedback.raised(call, type_name, message)
    line = getattr(exc, "line", None)
    text = got.message[:-1] if got.message.endswith(".") else got.message
    text += f" (your code, line {line})." if line else "."
    feedback.fail(text + (f" {hint}" if hint else ""), details=got.details)


def _shape_problem(call: str, got) -> str:
    """What is wrong with the kind of value split_batch returned ("" when it is a list of lists)."""
    if got is None:
        return (
            f"{call} returned None: it must return the list of shards. A function with no `return` statement, or "
            "whose `return` is never reached, returns None."
        )
    if isinstance(got, Opaque) and got.type_name.rsplit(".", 1)[-1] == "generator":
        return (
            f"{call} returned a generator, not a list: a function that uses `yield`, or returns a generator "
            "expression `(... for ...)`, gives a generator. Build the shards in a list and return that list."
        )
    if isinstance(got, tuple):
        return (
            f"{call} returned a tuple, not a list: torch.chunk returns a tuple, but split_batch must return a list "
            "of shards, each shard a list (build a list, or wrap the tuple in list(...))."
        )
    if not isinstance(got, list):
        return f"{call} returned {_kind(got)}, not a list: return a list of shards, each shard a list."
    for i, shard in enumerate(got):
        if not isinstance(shard, list):
            return (
                f"{call} returned {_show(got)}: shard {i} is {_kind(shard)}, but every shard must be a list "
                "(a slice batch[a:b] of the list is one; wrap anything else in list(...))."
            )
    return ""


def _raised_hint(submission, batch, n, exc) -> str:
    """What to add when split_batch(batch, n) raised for a valid n: a cause only where a second call isolates it."""
    type_name = getattr(exc, "type_name", type(exc).__name__)
    if not batch:
        try:  # is it the empty batch, or this n_devices?
            submission.split_batch([0, 1, 2, 3], n)
        except Exception as again:
            if getattr(again, "type_name", type(again).__name__) == type_name:
                refused = f"split_batch([0, 1, 2, 3], {n}) raises {type_name} too, so n_devices = {n} itself fails"
                if type_name == "ValueError":
                    return f"{refused}: n_devices = {n} is valid, only n_devices < 1 must raise ValueError."
                return f"{refused}, whatever the batch: for n_devices >= 1 return the list of shards."
        # split_batch([0, 1, 2, 3], n) did not fail this way: the empty batch is what the code does not handle.
        # Which step raised shows in the exception's own text.
        text = str(exc.args[0]) if exc.args else ""
        empty = (
            f"An empty batch is valid: split_batch([], {n}) must return {_items(n, 'empty list')}, as "
            f"torch.arange(0).chunk({n}) gives {_items(n, 'empty chunk')}."
        )
        if type_name == "ValueError" and "range() arg 3 must not be zero" in text:
            return (
                "For an empty batch the shard size is ceil(0 / n) = 0, and range(0, 0, 0) raises this: a range's "
                f"step cannot be 0. {empty} Handle the empty batch as a case of its own before the slicing loop."
            )
        if type_name == "ZeroDivisionError":
            return (
                "For an empty batch the shard size is ceil(0 / n) = 0, and dividing by that size raises this. "
                f"{empty} Handle the empty batch as a case of its own before using the size."
            )
        if type_name == "ValueError":
            return f"{empty} Only n_devices < 1 must raise ValueError."
        return (
            f"split_batch([0, 1, 2, 3], {n}) does not raise {type_name}, so it is the empty batch your code does "
            f"not handle. {empty}"
        )
    if type_name == "ValueError":
        return f"n_devices = {n} is valid: only n_devices < 1 must raise ValueError; here return the shards."
    return "For a valid n_devices (>= 1) it should return the list of shards."


def _split(submission, probe, batch, n):
    """Call split_batch on a valid n_devices; turn an exception or a result of the wrong kind into feedback."""
    call = f"split_batch({_desc(batch)}, {n})"
    try:
        got = submission.split_batch(list(batch), n)
    except Exception as exc:  # the learner's exception, reported as a test failure
        type_name = getattr(exc, "type_name", type(exc).__name__)
        if any(not isinstance(x, int | float) or isinstance(x, bool) for x in batch) and (
            libraries := " and ".join(_tensor_libraries(probe))
        ):
            raw = str(exc.args[0]) if exc.args else ""
            feedback.fail(
                f"{call} raised {type_name} on a batch whose items are not all numbers. Your code imports "
                f"{libraries}: if it converts the batch to a tensor or array (torch.tensor, numpy.array), that "
                "works only for numbers (and torch.tensor stores floats as float32). Items can be anything and "
                "must come back unchanged: slice the list instead (no tensor library is needed).",
                details=f"{type_name}: {raw}" if raw else type_name,
            )
        _fail_raised(call, exc, _raised_hint(submission, batch, n, exc))
    problem = _shape_problem(call, got)
    if problem:
        feedback.fail(problem)
    return got


# ---------------------------------------------------------------- saying what is wrong with the shards


def _same_items(a, b) -> bool:
    """Whether ``a`` and ``b`` hold the same items in any order (items may be unhashable)."""
    if len(a) != len(b):
        return False
    rest = list(b)
    for item in a:
        for k, other in enumerate(rest):
            if type(other) is type(item) and other == item:
                del rest[k]
                break
        else:
            return False
    return True


def _loses_last_shard(submission, batch, n) -> bool:
    """Whether split_batch(batch, n) returns torch.chunk's shards but the last (False if it raises)."""
    want = _chunk(batch, n)
    try:
        return submission.split_batch(list(batch), n) == want[:-1]
    except Exception:  # only an observation: a call that raises isolates nothing
        return False


def _missing_last_shard(submission, batch, n, want) -> str:
    """Explain a result that is torch.chunk's shards without the last one. Two usual causes lose it: a shard count
    of len // size (rounds down, so only a shorter leftover shard is lost) and a loop that stops before
    len(batch) (range(0, len(batch) - 1, size): only a shard that starts at the last item is lost). Two more
    calls, each lost by one cause only, tell them apart."""
    total, size = len(batch), len(want[0])
    shorter = ", shorter" if len(want[-1]) < size else ""
    said = (
        f"The last{shorter} shard {_show(want[-1])} is missing: keep cutting shards until every item is used "
        f"(there are ceil({total}/{size}) = {len(want)} shards)."
    )
    floor_count = _loses_last_shard(submission, list(range(5)), 2)  # [[0, 1, 2], [3, 4]]: [3, 4] starts at 3
    stops_early = _loses_last_shard(submission, [0, 1], 2)  # [[0], [1]]: 2 // 1 = 2 shards, [1] starts at 1
    if floor_count and not stops_early:
        said += (
            f" split_batch(list(range(5)), 2) loses its shorter last shard [3, 4] too, while split_batch([0, 1], 2) "
            "keeps [1]: the shorter leftover shard is never cut, so most likely the number of shards is rounded "
            f"down (len // size, here {total} // {size} = {total // size}); it must be rounded up, ceil(len / size)."
        )
    elif stops_early and not floor_count:
        said += (
            " split_batch([0, 1], 2) loses its last shard [1] too, while split_batch(list(range(5)), 2) keeps "
            "[3, 4]: a last shard that starts at the batch's last item is never cut, so most likely the loop over "
            "start positions stops too early (range(0, len(batch) - 1, size)): loop up to len(batch), "
            "range(0, len(batch), size)."
        )
    elif floor_count and stops_early:
        said += (
            " split_batch([0, 1], 2) and split_batch(list(range(5)), 2) lose their last shards too, whatever their "
            "size: your code cuts one shard fewer than there are. Check where its loop, or its count of shards, "
            "stops (a `[:-1]` or a `- 1` too many)."
        )
    else:  # neither call loses its last shard: name only the causes that lose this one
        candidates = []
        if total % size:
            candidates.append(f"a shard count rounded down ({total} // {size} = {total // size})")
        if len(want[-1]) == 1:
            candidates.append("a loop over the start positions that stops before len(batch)")
        said += (
            f" Candidates: {' or '.join(candidates)}."
            if candidates
            else " Check where your loop, or your count of shards, stops: it stops one shard short."
        )
    return said


def _diagnosis(submission, probe, batch, n, got) -> str:
    """Say what is wrong with ``got`` (a list of lists) against torch.chunk's rule, naming a cause only where the
    shards themselves show it. "" when ``got`` is right."""
    want = _chunk(batch, n)
    if got == want:
        return ""
    total = len(batch)
    size = -(-total // n) if total else 0
    rule = f"every shard but the last has ceil({total}/{n}) = {_items(size)} and the last takes what is left"
    joined = [item for shard in got for item in shard]
    if not batch:
        return f"An empty batch gives n_devices empty shards, as torch.arange(0).chunk({n}) does."
    if joined == batch:
        said = []
        nonempty = [s for s in got if s]
        if len(nonempty) < len(got):
            empty = len(got) - len(nonempty)
            said.append(
                f"{empty} of your shards {'is' if empty == 1 else 'are'} empty, but a non-empty batch never gets "
                "an empty shard: when the items run out, stop (torch.chunk then returns fewer chunks than devices, and "
                "DataParallel uses only that many devices). Do not pad with empty shards."
            )
        sizes = _sizes(nonempty)
        base, extra = divmod(total, n)
        balanced = [s for s in [base + 1] * extra + [base] * (n - extra) if s]
        if sizes == _sizes(want):
            pass
        elif sizes == balanced:
            said.append(
                f"Your sizes {sizes} are balanced (the remainder spread one item at a time, as numpy.array_split "
                f"does). Balanced sizes are not torch.chunk's rule: {rule}."
            )
        elif len(set(sizes[:-1])) <= 1 and sizes and sizes[-1] <= sizes[0]:
            first = sizes[0]
            if first > size and total % n == 0 and first == total // n + 1:
                said.append(
                    f"Your shard size is {first}, one more than ceil({total}/{n}) = {size}. {n} divides {total} "
                    "exactly, and a size computed as len // n + 1 is one too big exactly then: compute the "
                    "ceiling as -(-len(batch) // n_devices) or math.ceil(len(batch) / n_devices)."
                )
            elif first > size:
                said.append(f"Your shard size is {first}, more than ceil({total}/{n}) = {size}: {rule}.")
            else:
                more = f", more shards than the {n} devices" if len(nonempty) > n else ""
                said.append(
                    f"Your shard size is {first}, less than ceil({total}/{n}) = {size}, so the batch needed "
                    f"{len(nonempty)} shards{more}. The size must be rounded up (len // n and round(len / n) can round "
                    f"down): {rule}."
                )
        else:
            said.append(f"Your shard sizes are {_sizes_text(got)}; torch.chunk's are {_sizes_text(want)}: {rule}.")
        return " ".join(said)
    dealt = [batch[i::n] for i in range(n)]
    if got == dealt or got == [s for s in dealt if s]:
        return (
            f"The items were dealt out like cards (shard 0 got items 0, {n}, {2 * n}, ...): each device gets one "
            "contiguous block of the batch, in order. Slice blocks (batch[start:start + size]), do not deal "
            "items out one by one."
        )
    if len(want) > 1 and got == want[:-1]:
        return _missing_last_shard(submission, batch, n, want)
    if len(joined) < total and joined == batch[: len(joined)]:
        left = batch[len(joined) :]
        if got and all(len(s) == total // n for s in got):
            return (
                f"Every shard has {total} // {n} = {_items(total // n)}, so the last {_items(len(left))} "
                f"{_show(left, 4)} {'is' if len(left) == 1 else 'are'} in no shard: floor-sized shards drop the "
                f"leftovers. {rule[:1].upper()}{rule[1:]}."
            )
        return (
            f"The last {_items(len(left))} {_show(left, 4)} {'is' if len(left) == 1 else 'are'} in no shard: every "
            "item must land in one shard."
        )
    if _same_items(joined, batch):
        try:  # items of mixed types do not sort: then the shards cannot be in sorted order either
            ordered = sorted(batch)
        except TypeError:
            ordered = batch
        if ordered != batch and joined == ordered:
            return (
                "Joined together your shards hold the batch's items sorted: the batch's own order must be kept. "
                "Do not sort the items (sorting also looks inside them, and fails on items that cannot be "
                "compared, such as dicts): slice the batch as it is."
            )
        return (
            "Every item is there, but not in the batch's order: each shard is a contiguous block of the batch, and "
            "the shards follow one another in order."
        )
    if len(joined) > total:
        return (
            f"Joined together your shards hold {len(joined)} items, but the batch has {total}: some items are in "
            "more than one shard (shards must not overlap)."
        )
    if len(joined) == total:
        k = next(i for i, (a, b) in enumerate(zip(joined, batch, strict=True)) if not (type(a) is type(b) and a == b))
        said = (
            f"Item {k} came back as {_show(joined[k])} instead of {_show(batch[k])}: items must come back "
            "unchanged (the same objects, never converted or looked into)."
        )
        libraries = _tensor_libraries(probe)
        if libraries:
            said += (
                f" Your code imports {' and '.join(libraries)}: if it converts the batch to a tensor or array, "
                "that can change the items (torch.tensor stores floats as float32) and works only for numbers; "
                "slice the list instead."
            )
        return said
    return (
        f"Joined together your shards hold {len(joined)} of the batch's {total} items: every item must land in "
        "exactly one shard."
    )


def _check_split(submission, probe, batch, n):
    """Split ``batch`` and compare with torch.chunk's rule, explaining any difference."""
    got = _split(submission, probe, batch, n)
    want = _chunk(batch, n)
    if got != want:
        feedback.fail(
            f"split_batch({_desc(batch)}, {n}) returned {_show(got)}; expected {_show(want)}. "
            + _diagnosis(submission, probe, batch, n, got)
        )


# ---------------------------------------------------------------- the tests


def test_even_split(submission, probe):
    _check_split(submission, probe, list(range(6)), 3)
    _check_split(submission, probe, list("abcdefgh"), 2)


def test_uneven_split_follows_chunk_rule(submission, probe):
    for n_items, n_dev in ((10, 3), (10, 4), (11, 4), (7, 2)):
        _check_split(submission, probe, list(range(n_items)), n_dev)


def test_fewer_shards_than_devices(submission, probe):
    for n_items, n_dev in ((2, 4), (6, 4), (3, 5), (1, 8)):
        _check_split(submission, probe, list(range(n_items)), n_dev)


def test_shards_keep_every_item_in_order(submission, probe):
    batches = [
        [f"img{i}" for i in range(17)],
        [{"id": i} for i in range(9)],
        [3.5, -1, "x", None, (1, 2)],
        [i / 10 for i in range(7)],
        list(range(100)),
    ]
    for batch in batches:
        for n_dev in (1, 2, 3, 4, 7, 16, 200):
            got = _split(submission, probe, batch, n_dev)
            joined = [item for shard in got for item in shard]
            call = f"split_batch({_desc(batch)}, {n_dev}) returned shards of sizes {_sizes_text(got)}"
            if joined != batch or not got or any(len(s) == 0 for s in got):
                said = _diagnosis(submission, probe, batch, n_dev, got) or "Every item must be in one shard."
                feedback.fail(f"{call}. {said}")
            if len(got) > n_dev:
                feedback.fail(
                    f"{call}: {len(got)} shards, but there can never be more shards than devices ({n_dev}). "
                    + _diagnosis(submission, probe, batch, n_dev, got)
                )


def test_input_not_mutated(probe):
    # Mutation only exists inside the learner's process: a probe watches it there.
    try:
        seen = probe("split_and_watch_input", list(range(10)), 3)
    except Exception as exc:  # the learner's exception, reported as a test failure
        _fail_raised("split_batch(list(range(10)), 3)", exc)
    batch, before = seen["input_after"], list(range(10))
    if batch != before:
        feedback.fail(
            f"after split_batch(batch, 3) the caller's batch is {_show(batch, 12)} instead of {before!r}; "
            "do not pop, remove or reorder items of the input list: slice it (slices are new lists)."
        )


def test_shards_are_new_lists(submission, probe):
    # Object identity only exists inside the learner's process: a probe reports it, the test decides.
    for batch, n in ((list(range(10)), 3), (list(range(5)), 1), ([], 3), ([], 1)):
        call = f"split_batch({_desc(batch)}, {n})"
        try:
            seen = probe("split_and_watch_input", list(batch), n)
        except Exception as exc:  # the learner's exception, reported as a test failure
            _fail_raised(call, exc, _raised_hint(submission, batch, n, exc))
        problem = _shape_problem(call, seen["shards"])
        if problem:
            feedback.fail(problem)
        for i, is_input in enumerate(seen["is_input"]):
            if is_input:
                feedback.fail(
                    f"{call} returned the caller's list itself as shard {i}, not a new list: changing that shard "
                    "later would change the caller's batch. Return new lists: batch[a:b] and list(batch) are "
                    "copies (a shortcut such as `return [batch]` is not)."
                )
        for i, earlier in enumerate(seen["same_as"]):
            if earlier >= 0:
                feedback.fail(
                    f"{call} returned one list object as both shard {earlier} and shard {i}: appending to one of "
                    "them changes the other. Every shard must be a list of its own; note that [[]] * n repeats "
                    "one list n times, while [[] for _ in range(n)] makes n lists."
                )


def _zero_let_through(submission, n_dev) -> str:
    """For n_devices = 0 that did not raise ValueError: whether negative counts do (a check of n_devices < 0)."""
    if n_dev != 0:
        return ""
    try:
        submission.split_batch(list(range(10)), -1)
    except ValueError:
        return (
            "split_batch(list(range(10)), -1) does raise ValueError, so your check rejects negative counts but lets "
            "0 through: it must reject every n_devices < 1, 0 included (`if n_devices < 1`, not `< 0`)."
        )
    except Exception:  # only an observation: another exception isolates nothing
        return ""
    return ""


def test_rejects_fewer_than_one_device(submission):
    raised_for_items = False
    for batch, n_dev in ((list(range(10)), 0), (list(range(10)), -1), (list(range(10)), -4), ([], 0), ([], -2)):
        call = f"split_batch({_desc(batch)}, {n_dev})"
        try:
            result = submission.split_batch(list(batch), n_dev)
        except ValueError:
            raised_for_items = raised_for_items or bool(batch)
            continue
        except Exception as exc:  # the learner's exception, of the wrong type
            type_name = getattr(exc, "type_name", type(exc).__name__)
            hint = _zero_let_through(submission, n_dev) or (
                "It must raise ValueError: check `if n_devices < 1` first and raise ValueError yourself."
            )
            if type_name == "AssertionError":
                hint += (
                    " An assert statement raises AssertionError (and is skipped entirely under python -O), so it "
                    "is no way to check an argument."
                )
            _fail_raised(call, exc, hint)
        if isinstance(result, Opaque) and result.type_name.rsplit(".", 1)[-1] == "generator":
            feedback.fail(
                f"{call} returned a generator instead of raising ValueError. If split_batch uses `yield`, none of "
                "its body (the n_devices check included) runs until the generator is iterated: return a list "
                "instead, and raise ValueError when n_devices < 1."
            )
        if not batch and raised_for_items:
            feedback.fail(
                f"{call} returned {_show(result)}, but split_batch(list(range(10)), 0) raised ValueError: "
                "n_devices < 1 must raise ValueError for an empty batch too. Check n_devices first, before the "
                "empty-batch case."
            )
        feedback.fail(
            f"{call} returned {_show(result)}; with fewer than one device there is nowhere to send the data, so "
            "raise ValueError. "
            + (_zero_let_through(submission, n_dev) or "Check `if n_devices < 1` before splitting.")
        )


def test_empty_batch(submission, probe):
    for n in (3, 1):
        got = _split(submission, probe, [], n)
        want = [[] for _ in range(n)]
        if got != want:
            none = " (no shards at all)" if got == [] else ""
            feedback.fail(
                f"split_batch([], {n}) returned {_show(got)}{none}; expected {want!r}. torch.arange(0).chunk({n}) "
                f"gives {n} empty chunk(s), so an empty batch gives n_devices empty shards. (The shard size is 0 "
                "here, so treat the empty batch as a case of its own before slicing.)"
            )
