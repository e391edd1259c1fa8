"""Hidden tests for train(rank, world_size): two real ranks, real DDP over gloo (runner.vdev.ddp).

The two ranks run once per grading job (the first test that needs them); every test then reads the same
results. Each test checks one part of the contract; a failing test names a cause only where a probe observed it
(probes.py lists the observations), and otherwise says what it saw and names the candidates as candidates.
"""

import re
import statistics

import pytest
import torch
from probes import PREFIX, TRUE_B, TRUE_W, dataset
from runner import feedback

WORLD = 2
ROWS_PER_RANK = 64 // WORLD
TIMEOUT_S = 40.0
RECIPE_STEPS = 20 * (ROWS_PER_RANK // 8)  # the prompt's recipe: 20 epochs of 4 batches of 8 per rank
_cache: dict = {}


def _ranks(probe):
    if "runs" not in _cache:
        try:
            _cache["runs"] = probe("run", world_size=WORLD, timeout_s=TIMEOUT_S)
        except Exception as exc:
            _cache["runs"] = exc
    runs = _cache["runs"]
    if isinstance(runs, Exception):
        type_name = getattr(runs, "type_name", type(runs).__name__)
        feedback.fail(feedback.raised(f"running train on {WORLD} ranks", type_name, str(runs)))
    return runs


def _text(entry) -> str:
    return bytes(int(b) for b in entry["data"] if int(b)).decode(errors="replace")


def _obs(r, name, default=0):
    entry = r["state"].get(PREFIX + name)
    return entry["data"][0] if entry and entry["data"] else default


def _returned(r) -> str:
    entry = r["state"].get(PREFIX + "returned")
    return _text(entry) if entry else ""


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _events(r) -> list[str]:
    out: list[str] = []
    for event, count in r.get("events") or []:
        out.extend([str(event)] * int(count))
    return out


def _what(event: str) -> str:
    if event == "B":
        return "a backward pass through the DDP model (DDP's gradient all-reduce)"
    if event == "W":
        return "DistributedDataParallel(...) (its start-up broadcast of rank 0's weights)"
    parts = event.split(" ")
    if len(parts) == 3:
        return f"dist.{parts[1]} of {parts[2]} value{'s' if parts[2] != '1' else ''}"
    return "a collective"


def _counts(events: list[str]) -> str:
    wraps, backs = events.count("W"), events.count("B")
    said = []
    if wraps:
        said.append(f"DistributedDataParallel(...) {'once' if wraps == 1 else f'{wraps} times'}")
    if backs:
        said.append(f"{backs} backward pass{'es' if backs != 1 else ''} through the DDP model")
    own = len(events) - wraps - backs
    if own:
        said.append(f"{own} torch.distributed call{'s' if own != 1 else ''}")
    return ", ".join(said)


def _state_of(r) -> str:
    if r["timed_out"]:
        return f"was still waiting after {TIMEOUT_S:g} s"
    if r["error"]:
        return "failed"
    if r["destroyed"] is None:
        return "exited"
    return "returned"


def _own_error(r) -> bool:
    e = r["error"]
    if not e:
        return False
    known = feedback.classify(str(e.get("type")), str(e.get("message")))
    return not (known and known[0].id.startswith("collective."))


def _diverged(runs) -> str:
    """Where the ranks' collectives (as the probe logged them, in order) first differ; "" when they do not."""
    if any(_own_error(r) for r in runs) or len(runs) != 2:
        return ""
    (ra, a), (rb, b) = ((r, _events(r)) for r in runs)
    i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
    if i == len(a) == len(b):
        return ""
    if i == len(a) or i == len(b):
        (short, s_ev), (long, l_ev) = ((ra, a), (rb, b)) if i == len(a) else ((rb, b), (ra, a))
        done = f"after {i} collective calls ({_counts(s_ev)})" if i else "without any collective call"
        said = (
            f"What the ranks did: rank {short['rank']} {_state_of(short)} {done}; rank {long['rank']} made the same "
            f"{i} and then its {_ordinal(i + 1)}, {_what(l_ev[i])}, which rank {short['rank']} never joined"
        )
        if l_ev[i] == "B":
            return said + (
                ": the ranks ran different numbers of training steps. Every rank must run the same number of steps; "
                "a loop bound, a break or an early stop that depends on the rank, its own data or its own loss makes "
                "them differ (decide together, on a value all-reduced over the ranks)."
            )
        return said + (
            ": a collective that only one rank made. Every rank must make every collective call, in the same "
            "order; a collective under `if rank == 0:` is the usual cause (call it on every rank and keep only the "
            "printing under the branch)."
        )
    return (
        f"What the ranks did: their {_ordinal(i + 1)} collectives differed: rank {ra['rank']} made {_what(a[i])} "
        f"where rank {rb['rank']} made {_what(b[i])}. Every rank must make the same collective calls in the same "
        "order; a collective that only some ranks make (under `if rank == 0:`, say) meets another rank's different "
        "one. Call it on every rank and keep only the printing under the branch."
    )


_NO_MODULE = re.compile(r"'(\w+)' object has no attribute 'module'")


def _module_hint(runs) -> str:
    """What to return instead when a rank read `.module` from something that is not a wrapper; "" otherwise.

    feedback's ``wrapper.module_elsewhere`` class already says why `.module` is not there: this adds only what
    this exercise wants back."""
    for r in runs:
        e = r["error"] or {}
        if e.get("type") == "AttributeError" and _NO_MODULE.search(str(e.get("message", ""))):
            return "Return the state_dict() of the model you wrapped, or ddp_model.module.state_dict()."
    return ""


def _ok_ranks(probe):
    runs = _ranks(probe)
    if any(r["timed_out"] or r["error"] or r["destroyed"] is None for r in runs):
        told = feedback.ranks(runs, what="train", timeout_s=TIMEOUT_S)
        extra = " ".join(s for s in (_module_hint(runs), _diverged(runs)) if s)
        feedback.fail(told.message + (" " + extra if extra else ""), details=told.details)
    for r in runs:
        returned = _returned(r)
        if returned:
            pytest.fail(
                f"train on rank {r['rank']} returned {returned}, not a state_dict. Every rank must return its "
                "trained model's state_dict (the unwrapped model's: keys 'weight' and 'bias'); after DDP training "
                "the ranks hold the same weights, so each can return them."
            )
    return runs


def _tensor(entry):
    return torch.tensor(entry["data"], dtype=torch.float64).reshape(entry["shape"])


def _model_state(r):
    return {k: v for k, v in r["state"].items() if not k.startswith(PREFIX)}


def _weights(r):
    state = _model_state(r)
    if set(state) != {"weight", "bias"}:
        pytest.fail(
            f"rank {r['rank']} returned keys {sorted(state)[:6]}; expected the unwrapped nn.Linear's state_dict "
            "with keys ['bias', 'weight']."
        )
    return _tensor(state["weight"]).reshape(1, 4), _tensor(state["bias"]).reshape(1)


def _last(r):
    """The weight and bias the DDP model held at its last forward pass, or None."""
    last = {k[len(PREFIX + "last.") :]: v for k, v in r["state"].items() if k.startswith(PREFIX + "last.")}
    w = [v for k, v in last.items() if k.endswith("weight") and v["shape"] == [1, 4]]
    b = [v for k, v in last.items() if k.endswith("bias") and v["shape"] == [1]]
    if len(w) != 1 or len(b) != 1:
        return None
    return _tensor(w[0]).reshape(1, 4), _tensor(b[0]).reshape(1)


def _num(v: float) -> str:
    return "below 0.0001" if v < 1e-4 else f"{v:.2g}"


def _mse(w, b) -> float:
    x, y = dataset()
    return float(((x.double() @ w.T + b - y.double()) ** 2).mean())


def _no_ddp(r) -> str:
    dp = int(_obs(r, "dp_forwards"))
    if "W" in _events(r) and not dp:
        return (
            f"rank {r['rank']} made a DistributedDataParallel model but never called it (0 forward passes through "
            "it), so DDP all-reduced no gradients and nothing synchronised its training with the other rank. Call "
            "the wrapped model in the training loop, `ddp_model(xb)`, not the plain model it wraps (the optimizer "
            "may keep the same parameters: DDP shares them with the model it wraps)."
        )
    said = f"rank {r['rank']} called no DistributedDataParallel model (0 forward passes through one)"
    if dp:
        said += (
            f"; it called an nn.DataParallel model {dp} times instead. DataParallel splits a batch over the GPUs "
            "of one process and does not connect separate processes, so nothing synchronised the ranks' training"
        )
    else:
        said += ", so nothing synchronised its training with the other rank"
    return said + (
        ". Wrap the model, `model = DistributedDataParallel(model)`, after init_process_group, and call that "
        "wrapped model in the training loop."
    )


def test_every_rank_finishes(probe):
    _ok_ranks(probe)


def test_returns_unwrapped_state_dict(probe):
    for r in _ok_ranks(probe):
        keys = sorted(_model_state(r))
        if keys == ["module.bias", "module.weight"]:
            pytest.fail(
                f"rank {r['rank']} returned keys {keys}: that is the DistributedDataParallel wrapper's state_dict. "
                "DDP keeps your model as `.module`; return ddp_model.module.state_dict() so the checkpoint "
                "loads into a plain nn.Linear."
            )
        if keys != ["bias", "weight"]:
            pytest.fail(
                f"rank {r['rank']} returned keys {keys[:6]}; expected nn.Linear(4, 1)'s state_dict: ['bias', 'weight']."
            )
        shapes = {k: _model_state(r)[k]["shape"] for k in keys}
        if shapes != {"bias": [1], "weight": [1, 4]}:
            pytest.fail(f"rank {r['rank']} returned shapes {shapes}; nn.Linear(4, 1) has weight [1, 4] and bias [1].")


def test_trains_through_ddp(probe):
    for r in _ok_ranks(probe):
        if int(_obs(r, "forwards")) <= 0:
            pytest.fail(_no_ddp(r))


def _samplers(r) -> list[list[int]]:
    entry = r["state"].get(PREFIX + "samplers")
    if not entry:
        return []
    return [[int(v) for v in row] for row in _tensor(entry).long().reshape(-1, 6).tolist()]


def _sampler_cause(runs) -> str:
    """Why the ranks' shares overlap, as their DistributedSamplers show it; "" when they look right."""
    used = {}
    for r in runs:
        made = _samplers(r)
        if not made:
            return (
                f"Rank {r['rank']} made no DistributedSampler, so nothing split the dataset between the ranks: its "
                "DataLoader went through all 64 samples. Give the DataLoader sampler=DistributedSampler(dataset, "
                "num_replicas=world_size, rank=rank) (and no shuffle=True on the loader itself)."
            )
        drawn = [s for s in made if s[4] > 0]
        if not drawn:
            return (
                f"Rank {r['rank']} made a DistributedSampler but never drew indices from it, so the DataLoader was not "
                "given it and went through all 64 samples. Pass it in: DataLoader(dataset, batch_size=8, "
                "sampler=sampler) (and no shuffle=True on the loader itself)."
            )
        used[r["rank"]] = drawn[0]
    for rank, (replicas, *_rest) in used.items():
        if replicas != WORLD:
            return (
                f"Rank {rank}'s DistributedSampler was made with num_replicas={replicas}; with {WORLD} ranks it must "
                f"be {WORLD} (num_replicas=world_size), or the shares do not fit together."
            )
    given = [used[r][1] for r in sorted(used)]
    if given != list(range(WORLD)):
        said = " and ".join(f"rank={used[r][1]} on rank {r}" for r in sorted(used))
        return (
            f"The ranks' DistributedSamplers were made with {said}: each rank's sampler must get its own rank "
            "(rank=rank), or two ranks take the same share."
        )
    if any(s[3] for s in used.values()):
        if len({s[3] for s in used.values()}) > 1:
            said = " and ".join(f"shuffle={bool(used[r][3])} on rank {r}" for r in sorted(used))
            return f"The ranks' DistributedSamplers were made with {said}: give every rank the same shuffle setting."
        if len({s[2] for s in used.values()}) > 1:
            said = " and ".join(f"seed={used[r][2]} on rank {r}" for r in sorted(used))
            return (
                f"The ranks' DistributedSamplers shuffle with different seeds ({said}): each rank shuffles the 64 "
                "indices into a different order and takes its share of its own order, so the shares overlap. Give "
                "every rank the same seed (the default, 0, or one constant)."
            )
        if len({s[5] for s in used.values()}) > 1:
            said = " and ".join(f"epoch {used[r][5]} on rank {r}" for r in sorted(used))
            return (
                f"The ranks' DistributedSamplers were first drawn from at different epochs ({said}): set_epoch must "
                "get the same number on every rank (the epoch), or the ranks shuffle differently and overlap."
            )
    return ""


def test_data_sharded_across_ranks(probe):
    x, _ = dataset()
    runs = _ok_ranks(probe)
    first = {}
    for r in runs:
        rows = _tensor(r["state"][PREFIX + "rows"]).float()
        if rows.shape[0] == 0:
            pytest.fail(f"{_no_ddp(r)} (With no batch through a DDP model, there is no DDP sharding to check.)")
        epoch = rows[:ROWS_PER_RANK]
        match = (epoch[:, None, :] - x[None, :, :]).abs().amax(dim=2) < 1e-6  # [rows, 64]
        if not bool(match.any(dim=1).all()):
            pytest.fail(
                f"rank {r['rank']} trained on rows that are not in the dataset of the prompt. Every rank must build "
                "the same 64 samples (torch.Generator().manual_seed(1234)); the sampler then picks each rank's share."
            )
        first[r["rank"]] = set(match.float().argmax(dim=1).tolist())
    shared = first[0] & first[1]
    covered = len(first[0] | first[1])
    if not shared and covered == 64:
        return
    if shared:
        seen = (
            f"In their first {ROWS_PER_RANK} samples, rank 0 and rank 1 both trained on {len(shared)} of the same "
            f"samples (e.g. indices {sorted(shared)[:8]}); with {WORLD} ranks each should see its own half of the 64."
        )
    else:
        seen = (
            f"Between them, the ranks' first {ROWS_PER_RANK} samples each covered only {covered} of the 64; with "
            f"{WORLD} ranks each should see its own half, {ROWS_PER_RANK} different samples."
        )
    cause = _sampler_cause(runs)
    if cause:
        pytest.fail(f"{seen} {cause}")
    pytest.fail(
        f"{seen} Each rank's DistributedSampler looked right (num_replicas={WORLD}, its own rank, one seed), so the "
        "rows that reached the DDP model were not the ones it picks: train on the batches of a DataLoader given "
        "sampler=sampler (or on the indices the sampler yields), one pass over them per epoch."
    )


def test_uses_distributed_sampler(probe):
    for r in _ok_ranks(probe):
        rank = r["rank"]
        made = _samplers(r)
        if not made:
            pytest.fail(
                f"Rank {rank} made no DistributedSampler, so its batches did not come from one. The task asks you to "
                "load the data through a DistributedSampler: give the DataLoader sampler=DistributedSampler(dataset, "
                "num_replicas=world_size, rank=rank), which picks each rank's share of the one dataset (and, when it "
                "shuffles, a new order every epoch through set_epoch), instead of splitting the data yourself."
            )
        if not any(s[4] > 0 for s in made):
            pytest.fail(
                f"Rank {rank} made a DistributedSampler but never drew indices from it, so its batches did not come "
                "from it. Pass it to the DataLoader: DataLoader(dataset, batch_size=8, sampler=sampler)."
            )
        passes, shuffles = int(_obs(r, "shuffled")), int(_obs(r, "shuffles"))
        if passes > 1 and shuffles == 1:
            pytest.fail(
                f"Rank {rank}'s DistributedSampler shuffles, but all {passes} passes over it drew the same order: it "
                "seeds its shuffle with seed + epoch, and the epoch never changed, so every epoch repeated the first "
                "epoch's order and split. Call sampler.set_epoch(epoch) at the start of every epoch, on every rank."
            )


def test_replicas_end_identical(probe):
    runs = _ok_ranks(probe)
    (w0, b0), (w1, b1) = (_weights(r) for r in runs)
    diff = float(max((w0 - w1).abs().max(), (b0 - b1).abs().max()))
    if diff < 1e-5:
        return
    seen = f"rank 0 and rank 1 returned different weights (max difference {diff:.3g})"
    for r in runs:
        if int(_obs(r, "forwards")) <= 0:
            pytest.fail(f"{seen}: {_no_ddp(r)}")
    lasts = [_last(r) for r in runs]
    if all(lasts):
        (lw0, lb0), (lw1, lb1) = lasts
        if float(max((lw0 - lw1).abs().max(), (lb0 - lb1).abs().max())) < 1e-5:
            pytest.fail(
                f"{seen}, although their weights were identical at their last forward pass through the DDP model: "
                "something changed them after training, differently on each rank. Return the weights as training "
                "left them."
            )
    pytest.fail(
        f"{seen} although both trained through DistributedDataParallel. DDP keeps the copies identical only when "
        "every update goes through it; candidates: an optimizer over the parameters of a model other than the one "
        "DDP wraps, training steps on the plain model as well as the wrapped one, or a step one rank takes and the "
        "other does not."
    )


def _loss_shape(r) -> str:
    """What the gradient at the model's outputs shows about the loss: "own", "mean" (broadcast) or "other"."""
    entry = r["state"].get(PREFIX + "fit.sizes")
    if not entry:
        return ""
    sizes = [int(s) for s in entry["data"] if int(s) > 0]
    if not sizes:
        return ""
    rows = _tensor(r["state"][PREFIX + "fit.rows"]).reshape(-1, 4)
    out = _tensor(r["state"][PREFIX + "fit.out"]).reshape(-1)
    grad = _tensor(r["state"][PREFIX + "fit.grad"]).reshape(-1)
    y = (rows @ TRUE_W.double().T + TRUE_B).reshape(-1)
    own, mean = [], []
    start = 0
    for n in sizes:
        g, o, t = grad[start : start + n], out[start : start + n], y[start : start + n]
        start += n
        for fits, u in ((own, o - t), (mean, o - t.mean())):
            if float(u.norm()) > 1e-9 and float(g.norm()) > 1e-12:
                c = float(g @ u) / float(u @ u)
                fits.append(float((g - c * u).norm() / g.norm()) if c > 0 else 1.0)
    if own and statistics.median(own) < 0.01:
        return "own"
    if mean and statistics.median(mean) < 0.01:
        return "mean"
    return "other" if own else ""


def _loss_said(shape: str) -> str:
    if shape == "mean":
        return (
            "The gradient that reached the model's outputs was that of (prediction - the mean of the batch's "
            "targets), not (prediction - its own target): the loss compared every prediction with every target. "
            "That is what mean squared error does when predictions of shape (8,) meet targets of shape (8, 1) (they "
            "broadcast to (8, 8)), for example after model(xb).squeeze(); keep both (8, 1)."
        )
    if shape == "other":
        return (
            "The gradient that reached the model's outputs was not that of the squared error between each "
            "prediction and its own target (y = x @ [1, -2, 0.5, 3] + 0.5 for the batch's rows): train with the mean "
            "squared error between model(xb) and yb, both of shape (8, 1)."
        )
    return ""


def test_loss_is_mean_squared_error(probe):
    for r in _ok_ranks(probe):
        said = _loss_said(_loss_shape(r))
        if said:
            pytest.fail(f"On rank {r['rank']}: {said[:1].lower()}{said[1:]}")


def test_model_learned(probe):
    runs = _ok_ranks(probe)
    _, y = dataset()
    baseline = float(((y - y.mean()) ** 2).mean())
    limit = 0.01 * baseline
    for r in runs:
        w, b = _weights(r)
        mse = _mse(w, b)
        if mse < limit:
            continue
        rank = r["rank"]
        seen = (
            f"rank {rank}'s returned model has mean squared error {mse:.3g} on the 64 samples (predicting the mean "
            f"gives {baseline:.3g}); it should be below {limit:.2g}."
        )
        last = _last(r)
        if last is not None and _mse(*last) < limit:
            lw, lb = last
            said = (
                f"{seen} The weights the DDP model held at its last forward pass fit the data (mean squared error "
                f"{_num(_mse(lw, lb))}), so what train returned is not what training left: the weights were changed "
                "after training, or taken from another model."
            )
            trained, got = torch.cat([lw.reshape(-1), lb]), torch.cat([w.reshape(-1), b])
            factor = float(got @ trained) / float(trained @ trained)
            if abs(factor - WORLD) < 0.05 * WORLD and float((got - factor * trained).norm()) < 0.05 * float(got.norm()):
                said += (
                    f" The returned weights are {factor:.2f} times the trained ones: a sum over the {WORLD} ranks "
                    "(dist.all_reduce sums unless told otherwise). DDP already keeps the copies identical, so no "
                    "averaging is needed after training; return the weights as training left them."
                )
            else:
                said += " Return the weights as training left them."
            pytest.fail(said)
        backwards, stale = int(_obs(r, "backwards")), int(_obs(r, "stale"))
        if backwards > 1 and stale >= (backwards - 1) / 2:
            pytest.fail(
                f"{seen} In {stale} of rank {rank}'s {backwards} backward passes the parameters' .grad still held "
                "gradients when the pass began: backward adds to .grad, so without clearing it every step used the "
                "sum of all earlier gradients. Call optimizer.zero_grad() once in every step, before backward."
            )
        said = _loss_said(_loss_shape(r))
        if said:
            pytest.fail(f"{seen} {said}")
        steps, lr = int(_obs(r, "steps")), float(_obs(r, "lr", -1.0))
        if steps == 0:
            pytest.fail(
                f"{seen} Rank {rank} ran {backwards} backward passes but never called optimizer.step(), so the "
                "weights never changed: call it after every backward."
            )
        foreign, empty = int(_obs(r, "foreign_steps")), int(_obs(r, "empty_steps"))
        if foreign == steps:
            pytest.fail(
                f"{seen} Rank {rank}'s optimizer holds none of the parameters of the model DDP wraps, so its {steps} "
                "steps never changed the model that trained. Make the optimizer over ddp_model.parameters() (or the "
                "wrapped model's own parameters(): DDP shares them)."
            )
        if empty == steps:
            pytest.fail(
                f"{seen} In all {steps} of rank {rank}'s optimizer steps, every parameter it updates had no gradient "
                "(.grad None or zero), so the steps changed nothing. optimizer.step() must come after loss.backward(), "
                "which fills .grad; the order in every step is zero_grad(), forward, backward(), step() (a step before "
                "backward, or a zero_grad() between backward and step, finds no gradient to apply)."
            )
        rate = f" at learning rate {lr:g}" if lr >= 0 else ""
        pytest.fail(
            f"{seen} Rank {rank} took {steps} optimizer steps{rate} over {backwards} backward passes; the prompt's "
            f"recipe (SGD lr=0.1, batches of 8, 20 epochs) takes {RECIPE_STEPS}. The loss, the clearing of the "
            "gradients and the steps' gradients looked right, so the candidates are too few steps or too small a "
            "learning rate."
        )


def test_destroys_process_group(probe):
    runs = _ok_ranks(probe)
    kept = [r["rank"] for r in runs if not r["destroyed"]]
    if not kept:
        return
    if len(kept) < len(runs):
        done = [r["rank"] for r in runs if r["destroyed"]]
        pytest.fail(
            f"rank {kept[0]} returned with the process group still initialised (rank {done[0]} destroyed its own). "
            "Call dist.destroy_process_group() on every rank when training is done: it releases the group's "
            "sockets and threads, and lets the same process start a new group later."
        )
    pytest.fail(
        f"rank {kept[0]} returned with the process group still initialised. Call dist.destroy_process_group() when "
        "training is done: it releases the group's sockets and threads, and lets the same process start a new "
        "group later."
    )
