"""Hidden tests for average_gradients and train: real rank processes, gloo on the CPU (runner.vdev.ddp).

Each probe run happens once per grading job (the first test that needs it); the tests then read the same
results. The reference for train is computed here, in one process: with equal shards, averaging the ranks'
gradients of their mean losses equals the gradient of the mean loss over the union of their batches.

The verdicts come from values only (the gradients after average_gradients, the final weights). What the probes saw
each rank do ("seen": collectives, the rows its model was fed, the loss's arguments, the order of backward, average
and step) only explains a failure: a message names a cause when an observation shows it, and lists candidates when
none does.
"""

from collections import Counter
from itertools import pairwise

import pytest
import torch
from probes import FROZEN, PREFIX, grad_model, make_data, make_model, rank_grad
from runner import feedback

WORLD = 2
TIMEOUT_S = 40.0
EPOCHS, BATCH, LR = 10, 8, 0.1
PER_RANK = 64 // WORLD
STEPS = EPOCHS * (PER_RANK // BATCH)  # 40 optimizer steps per rank
TRAINABLE = [(n, tuple(p.shape)) for n, p in grad_model().named_parameters() if p.requires_grad]
AVG_VALUES = sum(torch.Size(shape).numel() for _, shape in TRAINABLE)  # 44 gradient values in run_average
MODEL_VALUES = sum(p.numel() for p in make_model().parameters())  # 49 in the prompt's model
_cache: dict = {}


# ---------------------------------------------------------------------------------------------------- the runs


def _runs(probe, name):
    if name not in _cache:
        try:
            _cache[name] = probe(name, world_size=WORLD, timeout_s=TIMEOUT_S)
        except Exception as exc:
            _cache[name] = exc
    runs = _cache[name]
    if isinstance(runs, Exception):
        feedback.fail(feedback.raised(f"running your code on {WORLD} ranks", type(runs).__name__, str(runs)))
    return runs


def _events(r, kind=None) -> list:
    return [e for e in (r.get("seen") or []) if isinstance(e, dict) and (kind is None or e.get("e") == kind)]


def _finished(r) -> bool:
    return not r["timed_out"] and not r["error"] and r["destroyed"] is not None


def _returned(value: str) -> str:
    return "None" if value == "NoneType" else f"a {value}"


def _count(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "es" if word.endswith(("s", "ch")) else "s")


def _ranks(ranks: list[int]) -> str:
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return "ranks " + ", ".join(map(str, ranks[:-1])) + f" and {ranks[-1]}"


def _grouped(found: list[tuple[int, str]]) -> list[str]:
    """Join the ranks that share one observation: [(0, text), (1, text)] -> ["On ranks 0 and 1, text"]."""
    by_text: dict[str, list[int]] = {}
    for rank, text in found:
        by_text.setdefault(text, []).append(rank)
    return [f"On {_ranks(ranks)}, {text}" for text, ranks in by_text.items()]


def _collective_text(r, event, steps: int) -> str:
    where = "inside average_gradients" if event.get("avg") else "outside average_gradients"
    return (
        f"rank {r['rank']}'s was {'an' if str(event.get('op'))[:1] in 'aeiou' else 'a'} {event.get('op')} of "
        f"{_count(int(event.get('n') or 0), 'value')} {where}, after {_count(steps, 'optimizer step')}"
    )


def _mismatch_notes(runs) -> list[str]:
    """The first collective where two ranks ran different ones (op, size or place): collectives pair up by order."""
    seqs = []
    for r in runs:
        seq, steps = [], 0
        for e in _events(r):
            if e.get("e") == "step":
                steps += 1
            elif e.get("e") == "coll":
                seq.append((e, steps))
        seqs.append((r, seq))
    for (a, sa), (b, sb) in pairwise(seqs):
        for k, ((ea, na), (eb, nb)) in enumerate(zip(sa, sb, strict=False)):
            if (ea.get("op"), ea.get("n"), bool(ea.get("avg"))) == (eb.get("op"), eb.get("n"), bool(eb.get("avg"))):
                continue
            return [
                f"The ranks' collectives went out of step at collective number {k + 1}: "
                f"{_collective_text(a, ea, na)}; {_collective_text(b, eb, nb)}. Collectives pair up by their order "
                "in each rank, so every rank must run the same collectives in the same order: a collective that only "
                "some ranks run (for example an all_reduce of the loss for logging on rank 0 alone) meets another "
                "rank's gradient all_reduce. Run it on every rank and print on one, or log the local loss."
            ]
    return []


def _failure_notes(runs) -> list[str]:
    """Observations that isolate why ranks failed: a group destroyed too early, ranks that skipped collectives."""
    found = []
    for r in runs:
        error = r["error"]
        if not error or "Default process group has not been initialized" not in str(error.get("message")):
            continue
        kinds = [e.get("e") for e in _events(r)]
        if "destroy" in kinds:
            steps = kinds[: kinds.index("destroy")].count("step")
            found.append(
                (
                    r["rank"],
                    f"dist.destroy_process_group() had run before that, after {_count(steps, 'optimizer step')}: "
                    "destroy the group once, after the training loop and its last collective.",
                )
            )
        elif "init_pg" not in kinds:
            found.append((r["rank"], "dist.init_process_group(...) had not been called before that."))
    notes = _grouped(found)
    notes += _mismatch_notes(runs)
    finished = [r for r in runs if _finished(r)]
    calls = {r["rank"]: len(_events(r, "avg")) for r in runs}
    colls = {r["rank"]: len(_events(r, "coll")) for r in runs}
    for r in finished:
        more = [k for k in calls if calls[k] > calls[r["rank"]]]
        if more:
            k = more[0]
            steps = len(_events(r, "step"))
            notes.append(
                f"Rank {r['rank']} returned after calling average_gradients {_count(calls[r['rank']], 'time')} in "
                f"{_count(steps, 'optimizer step')}, while rank {k} called it {_count(calls[k], 'time')}: an "
                "all_reduce waits until every rank has joined it, so every rank must call average_gradients at "
                "every step."
            )
            break
        more = [k for k in colls if colls[k] > colls[r["rank"]]]
        if more:
            k = more[0]
            notes.append(
                f"Rank {r['rank']} returned after starting {_count(colls[r['rank']], 'collective')} while rank {k} "
                f"started {colls[k]}: every rank must run the same collectives, the same number of times."
            )
            break
    return notes


def _ok(probe, name, what):
    runs = _runs(probe, name)
    bad = [r for r in runs if not _finished(r)]
    frozen = [r for r in runs if r["error"] and any(e.get("frozen") for e in _events(r, "raised"))]
    if frozen:
        types = sorted({r["error"]["type"] for r in frozen})
        feedback.fail(
            f"average_gradients failed on {_ranks([r['rank'] for r in frozen])} while it handled the frozen "
            f"parameter {FROZEN!r}, whose .grad is None (this test's model freezes that bias, so backward gives it "
            f"no gradient); it raised {' and '.join(types)}. Skip every parameter whose .grad is None "
            "(`if p.grad is None: continue`) and leave it None.",
            details="\n".join(f"rank {r['rank']}: {r['error']['type']}: {r['error']['message']}" for r in frozen),
        )
    for r in runs:
        for e in _events(r, "returned"):
            got = _returned(str(e.get("type")))
            if e.get("value"):
                got = f"a {e.get('type')} whose value for {e.get('key')!r} is {_returned(str(e.get('value')))}"
            feedback.fail(
                f"train on rank {r['rank']} returned {got}, not a dict of tensors. Every "
                "rank must return model.state_dict(): the tests compare the ranks' weights with each other and with "
                "the reference."
            )
    if bad:
        errors = {(r["error"]["type"], r["error"]["message"]) for r in runs if r["error"]}
        if len(bad) == len(runs) > 1 and all(r["error"] for r in runs) and len(errors) == 1:
            type_name, message = errors.pop()  # every rank raised the same: say it once
            explained = feedback.raised(f"{what} on every rank", type_name, message)
        else:
            explained = feedback.ranks(runs, what=what, timeout_s=TIMEOUT_S)
        notes = _failure_notes(runs)
        for r in runs:
            error = r["error"] or {}
            if "must match the size of tensor" not in str(error.get("message")):
                continue
            inside = what == "average_gradients" or "in average_gradients" in str(error.get("traceback"))
            total = AVG_VALUES if what == "average_gradients" else MODEL_VALUES
            if inside and any(e.get("avg") and e.get("n") == total for e in _events(r, "coll")):
                notes.append(
                    f"On rank {r['rank']} it happened inside average_gradients, after one collective carried all "
                    f"{total} gradient values in one flat tensor: copy each slice back in its gradient's shape "
                    "(p.grad.copy_(flat[start:end].view_as(p.grad)))."
                )
                break
        feedback.fail(" ".join([explained.message, *notes]), details=explained.details)
    return runs


def _tensor(entry):
    return torch.tensor(entry["data"], dtype=torch.float64).reshape(entry["shape"])


def _state(r):
    return {k: _tensor(v) for k, v in r["state"].items() if not k.startswith(PREFIX)}


def _show(t: torch.Tensor, n: int = 4) -> str:
    values = [f"{v:.4g}" for v in t.flatten()[:n].tolist()]
    return "[" + ", ".join(values) + (", ...]" if t.numel() > n else "]")


def _close(a: torch.Tensor, b: torch.Tensor, tol: float = 1e-5) -> bool:
    return a.shape == b.shape and torch.allclose(a, b, atol=tol, rtol=0)


def _diff(a: dict, b: dict) -> float:
    """Largest difference between two states; NaN or infinity in the same place on both sides counts as equal."""
    worst = 0.0
    for k in b:
        x, y = a[k], b[k]
        same = (x == y) | (torch.isnan(x) & torch.isnan(y))
        gap = torch.where(same, torch.zeros_like(x), (x - y).abs())
        worst = max(worst, float(torch.nan_to_num(gap, nan=float("inf")).max()))
    return worst


# ------------------------------------------------------------------------------------ what average_gradients did


def _inside(r):
    """The collectives and dist.all_reduce calls this rank made inside average_gradients."""
    colls = [e for e in _events(r, "coll") if e.get("avg")]
    api = [e for e in _events(r, "api") if e.get("avg")]
    return colls, api


def _ops(colls) -> str:
    counts = Counter(str(e.get("op")) for e in colls)
    return ", ".join(f"{op} x{n}" for op, n in sorted(counts.items()))


def _average_cause(r, i: int, got, want, own) -> str:
    """Why parameter i of rank r holds `got` instead of `want`: the cause an observation shows, else candidates."""
    colls, api = _inside(r)
    ops_seen = [str(e.get("op")) for e in colls]
    ops = set(ops_seen)
    reduce_ops = {str(e.get("op")) for e in api}
    sent = sum(int(e.get("n") or 0) for e in colls)
    started = sum(1 for e in api if e.get("asynchronous"))
    waited = sum(1 for e in _events(r, "wait") if e.get("avg"))
    if started and waited < started:
        return (
            f"your average_gradients started {_count(started, 'all_reduce')} with async_op=True and called .wait() "
            f"on {waited} of the returned works. Such a call returns at once, and the sum lands in the tensor only "
            "when its work completes: dividing or reading the tensor before work.wait() sees whatever it holds at "
            "that moment. Call .wait() on every returned work before dividing (or leave async_op out)."
        )
    if _close(got, want * WORLD, 1e-4):
        return (
            f"it is the SUM over the {WORLD} ranks, {WORLD} times the average. all_reduce with ReduceOp.SUM adds the "
            "ranks' tensors; divide by world_size afterwards (DDP averages)."
        )
    if _close(got, want / WORLD, 1e-5):
        if "AVG" in reduce_ops:
            return (
                "it is the average divided by world_size once more: your all_reduce used ReduceOp.AVG, which already "
                "divides by the number of ranks, and your code divided again. Use ReduceOp.AVG alone, or "
                "ReduceOp.SUM and then divide."
            )
        return (
            "it is the average divided by world_size once more: the gradient was divided twice (for example once "
            "before and once after the all_reduce). Divide the sum by world_size exactly once."
        )
    if "reduce" in ops and "allreduce" not in ops:
        return (
            f"your average_gradients called dist.reduce ({_count(Counter(ops_seen)['reduce'], 'call')}), "
            "which delivers the result to the destination rank only and leaves every other rank's tensor "
            "unspecified. Use dist.all_reduce, so that every rank receives the sum."
        )
    if not colls:
        if _close(got, own / WORLD, 1e-6):
            return (
                "it is this rank's own gradient divided by world_size: the division happened but the all_reduce did "
                "not: your average_gradients made no collective call on this rank. Call "
                "dist.all_reduce(param.grad, op=dist.ReduceOp.SUM) on every gradient, then divide."
            )
        return (
            "your average_gradients made no collective call on this rank, so no other rank's gradient could reach "
            "it: call dist.all_reduce(param.grad, op=dist.ReduceOp.SUM) on every gradient, then divide by world_size."
        )
    if _close(got, own, 1e-6) or _close(got, own / WORLD, 1e-6):
        what = (
            "still this rank's own gradient"
            if _close(got, own, 1e-6)
            else "this rank's own gradient divided by world_size"
        )
        if sent < AVG_VALUES:
            state = _state(r)
            left = []
            for k, (name, shape) in enumerate(TRAINABLE):
                mine = rank_grad(r["rank"], k, shape).double()
                if name in state and (_close(state[name], mine, 1e-6) or _close(state[name], mine / WORLD, 1e-6)):
                    left.append(name)
            named = f" (on this rank: {', '.join(repr(n) for n in left)})" if left else ""
            return (
                f"it is {what}: it was never communicated. The collectives in average_gradients carried {sent} of "
                f"the {AVG_VALUES} gradient values ({_ops(colls)}), so some parameters were left out{named}: average "
                "every parameter whose .grad is not None, every layer's weight and bias."
            )
        return (
            f"it is {what}, although average_gradients ran collectives carrying {sent} values ({_ops(colls)}): the "
            "result never reached param.grad. all_reduce works in place on the tensor it is given; the candidates "
            "are an all_reduce of a copy (.clone(), torch.cat(...), a new tensor) whose result was not copied back "
            "into param.grad, or param.grad replaced afterwards by a value computed from the old one."
        )
    if started:
        return (
            f"it is not the element-wise mean of the ranks' gradients. Your average_gradients ran {_ops(colls)} "
            f"carrying {sent} values, started with async_op=True and waited on: divide each tensor only after its "
            "work's wait() has returned."
        )
    return (
        "it is not the element-wise mean of the ranks' gradients. On this rank your average_gradients ran "
        f"{_ops(colls) or 'no collective'} carrying {sent} values."
    )


def _average_problem(runs) -> tuple[str, str] | None:
    """The first gradient that average_gradients left wrong: (what was observed, its cause); None when all are right."""
    for r in runs:
        state = _state(r)
        for i, (name, shape) in enumerate(TRAINABLE):
            want = sum(rank_grad(k, i, shape).double() for k in range(WORLD)) / WORLD
            where = f"rank {r['rank']}, parameter {name!r} (parameter {i + 1} of {len(TRAINABLE)} with a gradient)"
            if name not in state:
                return where, "After average_gradients it has no .grad any more: change .grad's values in place."
            got, own = state[name], rank_grad(r["rank"], i, shape).double()
            if _close(got, want):
                continue
            cause = _average_cause(r, i, got, want, own)
            observed = (
                f"{where}: after average_gradients its .grad starts {_show(got)}; the average over the ranks starts "
                f"{_show(want)} and this rank's own gradient {_show(own)}."
            )
            return observed, cause[:1].upper() + cause[1:]
    return None


def _average_note(probe) -> str | None:
    """What the averaging test found wrong with average_gradients, for the training tests (None: nothing)."""
    try:
        runs = _runs(probe, "run_average")
    except feedback.Failed:
        return None
    if not all(_finished(r) for r in runs):
        return "average_gradients also fails on its own (test_average_gradients_averages_every_parameter)."
    problem = _average_problem(runs)
    if problem is None:
        return None
    where, cause = problem
    cause = cause[:1].lower() + cause[1:]  # every cause starts with "It" or "Your"
    return f"average_gradients does not average (its own test saw it on {where.split(' (')[0]}): {cause}"


# -------------------------------------------------------------------------------------------- what train did


def _trained(probe):
    runs = _ok(probe, "run_train", "train")
    want = sorted(make_model().state_dict())
    states = []
    for r in runs:
        state = _state(r)
        if sorted(state) != want:
            pytest.fail(
                f"Rank {r['rank']} returned keys {sorted(state)[:6]}; expected the plain model's state_dict keys "
                f"{want}. Return model.state_dict() of nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))."
            )
        states.append(state)
    return runs, states


def _initial(r) -> dict[str, torch.Tensor]:
    """The weights each layer held at its first forward pass on this rank (before any step)."""
    out = {}
    for e in _events(r, "init"):
        layer = e.get("layer")
        if f"{layer}.weight" in out or e.get("weight") is None:
            continue
        out[f"{layer}.weight"] = torch.tensor(e["weight"], dtype=torch.float64)
        if e.get("bias") is not None:
            out[f"{layer}.bias"] = torch.tensor(e["bias"], dtype=torch.float64)
    return out


def _init_reference() -> dict[str, torch.Tensor]:
    return {k: v.detach().double().reshape(-1) for k, v in make_model().state_dict().items()}


def _order(r) -> tuple[int, int, int, int]:
    """On this rank: (optimizer steps with no average_gradients call between the last backward and the step,
    average_gradients calls that found every gradient empty or zero, calls that came right after a step with
    gradients in hand, optimizer steps)."""
    missing = after = steps = 0
    averaged_since_backward, since_step = True, False
    for e in _events(r):
        kind = e.get("e")
        if kind == "bwd":
            averaged_since_backward, since_step = False, False
        elif kind == "avg":
            averaged_since_backward = True
            after += since_step and bool(e.get("nonzero"))
        elif kind == "step":
            steps += 1
            missing += not averaged_since_backward
            since_step = True
    empty = sum(1 for e in _events(r, "avg") if e.get("nonzero") == 0)
    return missing, empty, after, steps


def _order_notes(runs) -> list[str]:
    found = []
    for r in runs:
        missing, empty, after, steps = _order(r)
        calls = len(_events(r, "avg"))
        if empty and missing:
            text = (
                f"average_gradients ran {_count(empty, 'time')} when every gradient was still empty or zero, and "
                f"{missing} of the {_count(steps, 'optimizer step')} had no average between backward and the step: "
                "it ran before loss.backward(), so there was nothing to average and each rank stepped with its own "
                "gradient. Call it after loss.backward() and before optimizer.step()."
            )
        elif missing and calls:
            where = " (it ran after the step instead)" if after else ""
            text = (
                f"{missing} of the {_count(steps, 'optimizer step')} ran with no average_gradients between "
                f"loss.backward() and the step{where}, so each rank applied its own gradient. Call it after "
                "loss.backward() and before optimizer.step()."
            )
        elif missing and not calls and steps:
            text = (
                f"average_gradients was never called in {_count(steps, 'optimizer step')}: call "
                "average_gradients(model, world_size) after loss.backward() and before optimizer.step()."
            )
        else:
            continue
        found.append((r["rank"], text))
    return _grouped(found)


def _init_notes(runs) -> list[str]:
    inits = [_initial(r) for r in runs]
    if len(inits) < 2 or not all(inits) or any(set(i) != set(inits[0]) for i in inits):
        return []
    spread = 0.0
    for other in inits[1:]:
        for k, first in inits[0].items():
            gap = (first - other[k]).abs().max() if first.shape == other[k].shape else torch.tensor(1.0)
            spread = max(spread, float(gap))
    if spread <= 1e-7:
        return []
    return [
        f"The ranks started from different weights: at their first forward pass rank 0's and rank 1's layers "
        f"differed by up to {spread:.3g}. Without DDP nobody broadcasts rank 0's weights, so call "
        "the same torch.manual_seed(0) on every rank right before building the model."
    ]


def _sent_per_call(r) -> int | None:
    """Gradient values one average_gradients call sent in collectives (the most over its calls), None if never."""
    per, current, inside = [], 0, False
    for e in _events(r):
        kind = e.get("e")
        if kind == "avg":
            current, inside = 0, True
        elif kind == "coll" and e.get("avg") and inside:
            current += int(e.get("n") or 0)
        elif kind == "avg_end" and inside:
            per.append(current)
            inside = False
    return max(per) if per else None


def _rows(r, rank: int) -> list[str]:
    """What the rank's training forward passes were fed, compared with the prompt's block, batches and order."""
    x, _ = make_data()
    index = {tuple(round(v, 5) for v in row): i for i, row in enumerate(x.double().tolist())}
    batches = [e.get("rows") for e in _events(r, "fwd") if e.get("grad")]
    if not batches or any(b is None for b in batches):
        return []
    fed = [[index.get(tuple(round(v, 5) for v in row)) for row in b] for b in batches]
    flat = [i for b in fed for i in b]
    lo, hi = rank * PER_RANK, (rank + 1) * PER_RANK - 1
    if any(i is None for i in flat):
        unknown = sum(i is None for i in flat)
        return [
            f"Rank {rank}'s model was fed {unknown} of {len(flat)} training rows that are not rows of the prompt's x: "
            "build x exactly as the prompt does, torch.randn(64, 4, generator=torch.Generator().manual_seed(1234)), "
            "the same on every rank."
        ]
    outside = sorted({i for i in flat if not lo <= i <= hi})
    if outside:
        first = ", ".join(str(i) for i in fed[0][:8])
        block = f"x.chunk(world_size)[rank] (rank {rank}: rows {lo}-{hi})"
        if len(set(flat)) == len(x):
            return [
                f"Rank {rank} trained on all {len(x)} rows of x, in {_count(len(fed), 'batch')}: its first batch held "
                f"rows {first}. The data is built the same on every rank, but each rank trains only on its own "
                f"contiguous block, {block}."
            ]
        steps = {b - a for a, b in pairwise(fed[0])}
        strided = " (every other row, as x[rank::world_size] gives)" if steps == {WORLD} else ""
        return [
            f"Rank {rank} trained on rows outside its block: its first batch held rows {first} of x{strided}, and "
            f"{len(outside)} different rows of its batches lie outside rows {lo}-{hi}. Take the contiguous block "
            f"{block}."
        ]
    expected = [list(range(lo + s, lo + s + BATCH)) for _ in range(EPOCHS) for s in range(0, PER_RANK, BATCH)]
    if fed == expected:
        return []
    sizes = sorted(Counter(len(b) for b in fed).items())
    if len(fed) != len(expected):
        held = ", ".join(_count(n, "batch") + f" of {s} rows" for s, n in sizes)
        return [
            f"Rank {rank} ran {_count(len(fed), 'training forward pass')} ({held}); {EPOCHS} epochs over its "
            f"{PER_RANK} rows in batches of {BATCH} make {len(expected)}, each row once per epoch, the last batch "
            "included."
        ]
    if any(len(b) != BATCH for b in fed):
        return [
            f"Rank {rank}'s batches held {', '.join(f'{s} rows ({n} times)' for s, n in sizes)}; the prompt's "
            f"hold {BATCH}."
        ]
    k = next(j for j, (a, b) in enumerate(zip(fed, expected, strict=True)) if a != b)
    return [
        f"Rank {rank}'s batches did not follow its block in order: batch {k + 1} held rows "
        f"{', '.join(map(str, fed[k]))}, where the prompt's order gives {', '.join(map(str, expected[k]))} (no "
        "shuffling)."
    ]


def _loss_notes(r, rank: int) -> list[str]:
    losses = [e for e in _events(r, "loss") if e.get("grad")]
    notes = []
    reductions = {str(e.get("reduction")) for e in losses} - {"mean"}
    if reductions:
        notes.append(
            f"Rank {rank} called mse_loss with reduction={sorted(reductions)[0]!r}: the prompt's loss is "
            "nn.functional.mse_loss with its default mean over the batch; a sum makes every step as many times "
            "larger as the batch has elements."
        )
    shapes = {(tuple(e.get("input") or ()), tuple(e.get("target") or ())) for e in losses}
    for pred, target in sorted(shapes):
        if pred != target:
            try:
                grid = tuple(torch.broadcast_shapes(pred, target))
                spread = (
                    f", which broadcast to {grid}: the loss then averages the differences of every prediction with "
                    "every target"
                )
            except RuntimeError:
                spread = ""
            notes.append(
                f"Rank {rank}'s mse_loss got predictions of shape {pred} and targets of shape {target}{spread}. "
                "Build y as the prompt does, x @ torch.tensor([[1.0, -2.0, 0.5, 3.0]]).T + 0.5, a column of shape "
                "(64, 1)."
            )
            break
    return notes


def _target_notes(r, rank: int) -> list[str]:
    """Whether the targets given to mse_loss are the prompt's y for the rows fed (when both were seen)."""
    x, y = make_data()
    index = {tuple(round(v, 5) for v in row): i for i, row in enumerate(x.double().tolist())}
    batches = [e.get("rows") for e in _events(r, "fwd") if e.get("grad")]
    losses = [e for e in _events(r, "loss") if e.get("grad")]
    if not batches or len(batches) != len(losses) or any(b is None for b in batches):
        return []
    for b, loss in zip(batches, losses, strict=True):
        rows = [index.get(tuple(round(v, 5) for v in row)) for row in b]
        values = loss.get("values")
        if None in rows or values is None or len(values) != len(rows) or loss.get("input") != loss.get("target"):
            return []
        want = y[rows].double().reshape(-1)
        if not torch.allclose(torch.tensor(values, dtype=torch.float64), want, atol=1e-5):
            return [
                f"Rank {rank}'s mse_loss targets are not the prompt's y for the rows its model was fed: build y as "
                "x @ torch.tensor([[1.0, -2.0, 0.5, 3.0]]).T + 0.5 and take the same rows of x and y."
            ]
    return []


def _optimizer_notes(r, rank: int) -> list[str]:
    steps = _events(r, "step")
    if not steps:
        return []
    first = steps[0]
    opt, lr = first.get("opt"), first.get("lr")
    extra = {k: first.get(k) for k in ("momentum", "weight_decay") if first.get(k)}
    if opt == "SGD" and lr is not None and abs(lr - LR) < 1e-9 and not extra:
        return []
    setting = ", ".join([f"lr={lr:g}" if isinstance(lr, float) else "lr=?", *(f"{k}={v:g}" for k, v in extra.items())])
    return [
        f"Rank {rank} stepped with {opt}({setting}); the prompt's optimizer is "
        "torch.optim.SGD(model.parameters(), lr=0.1)."
    ]


def _reference() -> dict[str, torch.Tensor]:
    """One process, full global batch: what DDP (or correct hand averaging) computes on 2 ranks."""
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    x, y = make_data()
    shards = list(zip(x.chunk(WORLD), y.chunk(WORLD), strict=True))
    for _ in range(EPOCHS):
        for start in range(0, len(shards[0][0]), BATCH):
            xb = torch.cat([sx[start : start + BATCH] for sx, _ in shards])
            yb = torch.cat([sy[start : start + BATCH] for _, sy in shards])
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            loss.backward()
            opt.step()
    return {k: v.detach().double() for k, v in model.state_dict().items()}


# --------------------------------------------------------------------------------------------------- the tests


def test_average_gradients_averages_every_parameter(probe):
    runs = _ok(probe, "run_average", "average_gradients")
    problem = _average_problem(runs)
    if problem is not None:
        observed, cause = problem
        feedback.fail(f"{observed[:1].upper()}{observed[1:]} {cause}")


def test_average_gradients_skips_missing_grads(probe):
    runs = _ok(probe, "run_average", "average_gradients")
    for r in runs:
        if FROZEN in r["state"]:
            feedback.fail(
                f"Rank {r['rank']}: the frozen parameter {FROZEN!r} had .grad None before average_gradients and has "
                "a gradient after it. Leave parameters without a gradient alone (skip `param.grad is None`)."
            )
        returned_none = bool(r["state"][PREFIX + "returned_none"]["data"][0])
        if not returned_none:
            feedback.fail(
                f"Rank {r['rank']}: average_gradients returned a value; it must change the .grad tensors in place "
                "and return None."
            )


def test_every_rank_finishes(probe):
    _ok(probe, "run_train", "train")


def test_does_not_use_ddp(probe):
    for r in _ok(probe, "run_train", "train"):
        made = int(r["state"][PREFIX + "ddp"]["data"][0])
        if made:
            feedback.fail(
                f"Rank {r['rank']} built {made} DistributedDataParallel object(s). This exercise is about doing "
                "DDP's job by hand: train the plain model and call average_gradients(model, world_size) yourself."
            )


def test_replicas_end_identical(probe):
    runs, (s0, s1) = _trained(probe)
    diff = _diff(s0, s1)
    if diff < 1e-5:
        return
    notes = _init_notes(runs) + _order_notes(runs)
    if not notes:
        average = _average_note(probe)
        notes = [average] if average else []
    if not notes:
        calls = {r["rank"]: len(_events(r, "avg")) for r in runs}
        if len(set(calls.values())) > 1:
            notes.append(
                "The ranks called average_gradients a different number of times ("
                + ", ".join(f"rank {k}: {n}" for k, n in calls.items())
                + "): every rank must call it at every step."
            )
    if not notes:
        for r in runs:
            sent = _sent_per_call(r)
            if sent is not None and sent < MODEL_VALUES:
                notes.append(
                    f"On rank {r['rank']}, one average_gradients call sent at most {sent} of the model's "
                    f"{MODEL_VALUES} gradient values to its collectives: the parameters left out drift apart. "
                    "Average every parameter's gradient."
                )
                break
    if not notes:
        notes.append(
            "The test did not observe which step went wrong. The copies stay identical only if they start identical "
            "(the same torch.manual_seed(0) on every rank right before building the model) and every rank applies "
            "the same averaged gradient to every parameter: average_gradients after loss.backward() and before "
            "optimizer.step(), on every rank, at every step."
        )
    feedback.fail(
        f"Rank 0 and rank 1 ended with different weights (they differ by up to {diff:.3g}). " + " ".join(notes)
    )


def test_matches_full_batch_training(probe):
    runs, states = _trained(probe)
    ref = _reference()
    reference_init = _init_reference()
    for r, state in zip(runs, states, strict=True):
        rank = r["rank"]
        finite = all(bool(torch.isfinite(v).all()) for v in state.values())
        diff = _diff(state, ref) if finite else float("inf")
        if diff < 1e-4:
            continue
        if finite:
            lead = (
                f"Rank {rank}'s final weights differ from one process training on both ranks' batches together "
                f"(16 samples per step) by up to {diff:.3g}."
            )
        else:
            lead = f"Rank {rank}'s final weights are not finite (NaN or infinity): the training diverged."
        notes = []
        init = _initial(r)
        if init and set(init) == set(reference_init):
            gap = max(
                float((init[k] - reference_init[k]).abs().max()) if init[k].shape == reference_init[k].shape else 1.0
                for k in init
            )
            if gap > 1e-6:
                notes.append(
                    f"At its first forward pass rank {rank}'s model did not hold the weights that torch.manual_seed(0) "
                    f"followed by nn.Sequential(...) gives (they differ by up to {gap:.3g}): call torch.manual_seed(0) "
                    "right before building the model, with nothing drawn from the random generator in between."
                )
        if not notes:
            notes += _init_notes(runs)  # this rank started right, another did not
        rows = _rows(r, rank)
        notes += rows
        notes += _loss_notes(r, rank)
        if not rows:
            notes += _target_notes(r, rank)
        stale = sum(1 for e in _events(r, "bwd") if e.get("stale"))
        if stale:
            notes.append(
                f"In {stale} of rank {rank}'s {_count(len(_events(r, 'bwd')), 'backward pass')}, the model's .grad "
                "still held the previous step's gradients: backward adds to .grad, so they piled up. Call "
                "optimizer.zero_grad() at the start of every step."
            )
        notes += _optimizer_notes(r, rank)
        steps = len(_events(r, "step"))
        if steps != STEPS and not rows:
            notes.append(f"Rank {rank} took {_count(steps, 'optimizer step')}; the prompt's training takes {STEPS}.")
        notes += _order_notes([r])
        average = _average_note(probe)
        if average:
            notes.append(average)
        if not notes:
            notes.append(
                "The test saw nothing out of place in what it observes (the initial weights, the rows fed, the loss's "
                "arguments, the optimizer, the order of backward, average_gradients and step, and average_gradients "
                "on its own). Other candidates: a different number of epochs or model, or a gradient changed "
                "between average_gradients and optimizer.step()."
            )
        feedback.fail(lead + " " + " ".join(notes))


def test_destroys_process_group(probe):
    for r in _ok(probe, "run_train", "train"):
        if not r["destroyed"]:
            called = bool(_events(r, "destroy"))
            feedback.fail(
                f"Rank {r['rank']} returned with the process group still initialised"
                + (" (dist.init_process_group ran again after dist.destroy_process_group())" if called else "")
                + ". Call dist.destroy_process_group() once, when training is done."
            )
