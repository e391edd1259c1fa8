"""Hidden tests for torch-elastic-resume: the learner's script under the real torchrun, rank 1 killed once.

The probe runs `torchrun --standalone --nproc-per-node 2 --max-restarts 1` on the script once per grading job
(the first test that needs it); every test reads the same run. Rank 1 is SIGKILLed right after its optimizer step
KILL_STEP in the first attempt (epoch 3 of 0-5, its second step); torchrun then restarts both workers. The judge
computes the uninterrupted run itself (reference below) and compares rank 0's final weights with it.

A failure message says what the harness observed (probes.py: steps, saves, loads, renames, set_epoch, the
optimizer's settings, the collectives the script called) and names a cause only where an observation shows it.
"""

import os

import torch
from probes import BATCH, EPOCHS, LR, MOMENTUM, STEPS_PER_EPOCH, WORLD, N, dataset
from runner import feedback
from torch import nn
from torch.utils.data import DistributedSampler

KILL_RANK, KILL_STEP = 1, 14
RUN_TIMEOUT_S = 420.0
TOTAL_STEPS = EPOCHS * STEPS_PER_EPOCH  # 24 optimizer steps per rank, uninterrupted
STEP_BUDGET = TOTAL_STEPS + STEPS_PER_EPOCH  # a resume may redo the epoch that was cut short, no more
TOL = 1e-5
_cache: dict = {}


def reference() -> dict[str, torch.Tensor]:
    """Rank 0's weights after the prompt's 6 epochs on 2 ranks, never interrupted, in one process.

    DDP averages the two ranks' gradients before every step, so each step here averages the gradients of the
    batches the two ranks' DistributedSamplers give them.
    """
    x, y = dataset()
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    samplers = [
        DistributedSampler(range(len(x)), num_replicas=WORLD, rank=r, shuffle=True, seed=0) for r in range(WORLD)
    ]
    for epoch in range(EPOCHS):
        orders = []
        for sampler in samplers:
            sampler.set_epoch(epoch)
            orders.append(list(sampler))
        for start in range(0, len(orders[0]), BATCH):
            grads = []
            for order in orders:
                rows = order[start : start + BATCH]
                model.zero_grad()
                nn.functional.mse_loss(model(x[rows]), y[rows]).backward()
                grads.append([p.grad.clone() for p in model.parameters()])
            for p, *per_rank in zip(model.parameters(), *grads, strict=True):
                p.grad = sum(per_rank) / WORLD
            optimizer.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _run(probe) -> dict:
    if "run" not in _cache:
        try:
            _cache["run"] = probe("launch", kill_rank=KILL_RANK, kill_step=KILL_STEP, timeout_s=RUN_TIMEOUT_S)
        except Exception as exc:
            _cache["run"] = exc
    run = _cache["run"]
    if isinstance(run, Exception):
        # The probe runs torchrun's agent, not the learner's code: a failure here is the grader's.
        feedback.fail(
            "the grader could not launch your script with torchrun, so it could not be observed: this is a problem "
            "of the grader, not of your script. Please submit again, and report it if it happens again.",
            details=f"{type(run).__name__}: {run}",
        )
    return run


def _attempts(run) -> dict[int, dict[int, list[dict]]]:
    """Every worker's events by attempt (torchrun's restart count) and rank."""
    by: dict[int, dict[int, list[dict]]] = {}
    for worker in run["runs"]:
        by.setdefault(worker["attempt"], {})[worker["rank"]] = worker["events"]
    return by


def _of(events, kind) -> list[dict]:
    return [e for e in events if e["event"] == kind]


def _steps(events) -> int:
    return len(_of(events, "step"))


def _ranks(ranks, restarted: bool = True) -> str:
    ranks = sorted(ranks)
    word = "restarted " if restarted else ""
    if len(ranks) == 1:
        return f"{word}rank {ranks[0]}"
    return f"{word}ranks " + " and ".join(map(str, ranks))


def _name(path: str, ckpt_dir: str) -> str:
    """A path as the learner knows it: a name inside --ckpt-dir, else the path."""
    if path.startswith(ckpt_dir + os.sep):
        return path[len(ckpt_dir) + 1 :]
    return path


def _in_ckpt_dir(path: str, ckpt_dir: str) -> bool:
    return path.startswith(ckpt_dir + os.sep)


# --- what the workers did, from their logs ---------------------------------------------------------------------


def _epochs(events) -> list[tuple[int, int]]:
    """[(epoch, optimizer steps made after that set_epoch)], in the order of the worker's set_epoch calls."""
    out: list[list[int]] = []
    for e in events:
        if e["event"] == "set_epoch":
            out.append([e["epoch"], 0])
        elif e["event"] == "step" and out:
            out[-1][1] += 1
    return [(epoch, steps) for epoch, steps in out]


def _kill_point(first) -> tuple[int, int] | None:
    """(epoch, steps made in it) where the killed rank died, from its set_epoch calls; None when it made none."""
    events = first.get(KILL_RANK, [])
    if not _of(events, "killed"):
        return None
    epochs = _epochs(events)
    return epochs[-1] if epochs else None


def _first_epoch(events) -> int | None:
    epochs = [e["epoch"] for e in _of(events, "set_epoch")]
    return epochs[0] if epochs else None


def _steps_per_epoch(first) -> int | None:
    """Optimizer steps of one whole epoch, seen on rank 0 before the kill (its set_epoch calls); None if unseen."""
    epochs = _epochs(first.get(0, []))[:-1]  # the last one was cut short by the kill
    counts = {steps for _, steps in epochs}
    return counts.pop() if len(counts) == 1 else None


def _errors(ranks: dict[int, list[dict]]) -> list[tuple[int, str, str, int | None]]:
    """(rank, type, message, line) of every worker of one attempt that ended with an exception."""
    found = []
    for rank, events in sorted(ranks.items()):
        errors = _of(events, "error")
        if errors:
            e = errors[-1]
            found.append((rank, e["type"], e["message"], e.get("line")))
    return found


def _told(errors: list[tuple[int, str, str, int | None]]) -> tuple[str, str]:
    """The errors of one attempt told as feedback: the rank whose own failure came first, the others after it."""
    own, followers = [], []
    for rank, type_name, message, line in errors:
        known = feedback.classify(type_name, message)
        (followers if known and known[0].id.startswith("collective.") else own).append((rank, type_name, message, line))
    # Ranks that failed the same way (one failure class, or one text, at one line) are told once.
    groups: dict[tuple[str, int | None], list[tuple[int, str, str]]] = {}
    for rank, type_name, message, line in own:
        known = feedback.classify(type_name, message)
        groups.setdefault((known[0].id if known else f"{type_name}: {message}", line), []).append(
            (rank, type_name, message)
        )
    parts = []
    for (_, line), failed in groups.items():
        rank, type_name, message = failed[0]
        where = f" (line {line} of your script)" if line else ""
        parts.append(feedback.raised(f"your script on rank {rank}{where}", type_name, message).message)
        if len(failed) > 1:
            others = [r for r, _, _ in failed[1:]]
            parts.append(f"{_ranks(others, False).capitalize()} failed the same way.")
    for rank, type_name, message, _ in followers:
        if own:
            parts.append(f"Rank {rank} then failed in a collective, because the rank above had stopped.")
        else:
            parts.append(feedback.raised(f"your script on rank {rank}", type_name, message).message)
    details = "\n".join(f"rank {rank}: {type_name}: {message}" for rank, type_name, message, _ in errors)
    return " ".join(part[:1].upper() + part[1:] for part in parts), details


def _last_seen(attempts) -> str:
    """Where each worker's log ends: `restarted rank 0: after optimizer step 3`."""
    parts = []
    for attempt, ranks in sorted(attempts.items()):
        for rank, events in sorted(ranks.items()):
            steps = _steps(events)
            last = events[-1]["event"] if events else "start"
            what = {
                "end": "finished",
                "killed": "killed by the grader",
                "error": "raised",
                "timed_out": "stopped at the time limit",
            }.get(last, f"after optimizer step {steps}" if steps else "before its first optimizer step")
            parts.append(f"{'restarted ' if attempt else ''}rank {rank}: {what}")
    return "; ".join(parts)


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _hang(attempts) -> str:
    """A rank left waiting in a collective the other rank did not call as often, told from the logs; else ""."""
    busy = [a for a, ranks in attempts.items() if any(_steps(ev) or _of(ev, "collective") for ev in ranks.values())]
    if not busy:
        return ""
    attempt = max(busy)
    ranks = attempts[attempt]
    when = "after the restart" if attempt else "before any rank was killed"
    for rank, events in sorted(ranks.items()):
        own = [e for e in events if e["event"] != "timed_out"]
        if not own or own[-1]["event"] != "collective":
            continue
        name, n = own[-1]["name"], own[-1]["n"]
        for other, other_events in sorted(ranks.items()):
            if other == rank:
                continue
            calls = len([e for e in _of(other_events, "collective") if e["name"] == name])
            if calls < n:
                times = "never called it" if calls == 0 else f"called it only {calls} time{'s' * (calls != 1)}"
                return (
                    f" {when.capitalize()}, rank {rank} waited in its {_ordinal(n)} call of dist.{name}() (after "
                    f"optimizer step {_steps(events)}), and rank {other} {times} (it had made {_steps(other_events)} "
                    f"optimizer steps). A collective returns only once every rank has called it: every rank must "
                    f"call dist.{name}() the same number of times, so a call inside `if rank == 0:` (or any branch "
                    "only some ranks take) waits forever."
                )
    return ""


def _finished(probe) -> dict:
    """The run, once it is known to have finished after a restart with rank 0's weights written; else fail."""
    run = _run(probe)
    attempts = _attempts(run)
    if not attempts:
        feedback.fail(
            f"torchrun started no worker (exit code {run['exit_code']}), so your script never ran: this is a "
            "problem of the grader, not of your script. Please report it."
        )
    if run["timed_out"]:
        seen = _last_seen(attempts)
        hang = _hang(attempts)
        if hang:
            why = hang.strip()
        elif "before its first optimizer step" in seen:
            why = (
                "A worker that never made a step was still starting: each is a new Python process that imports torch "
                "and joins the group, which takes seconds, and minutes on a busy grading machine. If your script "
                "does no slow work before its first step, submit it again."
            )
        else:
            why = (
                "A worker that stops making steps is usually waiting in a collective (DDP's gradient all-reduce, a "
                "barrier) that the other rank never joins: every rank must run the same collectives the same number "
                "of times, and after a restart every rank must resume from the same checkpoint."
            )
        feedback.fail(f"the run did not finish within {RUN_TIMEOUT_S:.0f} s ({seen}). {why}")
    first = attempts.get(0, {})
    if not any(_of(events, "killed") for events in first.values()):
        errors = _errors(first)
        if errors:
            told, details = _told(errors)
            feedback.fail(
                f"your script failed before any rank was killed. {_shared_rename(run, errors) or told}", details=details
            )
        ran = _steps(first.get(KILL_RANK, []))
        feedback.fail(
            f"rank {KILL_RANK} was to be killed after its optimizer step {KILL_STEP}, but it made only {ran} steps "
            f"(torchrun exit code {run['exit_code']}). Train {EPOCHS} epochs of {STEPS_PER_EPOCH} steps on each rank "
            "(64 samples, batches of 8 per rank, a DistributedSampler over 2 ranks)."
        )
    last = max(attempts)
    if last == 0:
        feedback.fail(
            f"rank {KILL_RANK} was killed and torchrun never restarted the workers (exit code {run['exit_code']}; "
            f"{_last_seen(attempts)})."
        )
    if run["exit_code"] != 0:
        errors = _errors(attempts[last])
        if not errors:
            feedback.fail(
                f"torchrun exited with code {run['exit_code']} after the restart ({_last_seen(attempts)}), and no "
                "restarted worker raised an exception: a worker that ends with a non-zero exit code or a signal "
                "(sys.exit(1), os._exit, killed for using too much memory) fails the run."
            )
        told, details = _told(errors)
        shared = _shared_rename(run, errors)
        if shared:
            feedback.fail(f"the run failed after the restart. {shared}", details=details)
        disagree = _restart_disagrees(attempts[last])
        feedback.fail(f"the run failed after the restart. {told}{disagree}", details=details)
    if not run["final_exists"]:
        feedback.fail(
            "the run finished after the restart, but nothing was written to --out. At the end, rank 0 must save the "
            "trained model's state_dict there: torch.save(model.state_dict(), args.out)."
        )
    if run["final"] is None:
        error = run["final_error"]
        if error.startswith("it holds"):  # the probe's own words: what the file holds
            feedback.fail(
                f"--out could not be read as a state_dict of tensors: {error}. Save model.state_dict() there."
            )
        feedback.fail(
            "--out could not be read with torch.load(path, weights_only=True), as a state_dict of tensors: save the "
            "plain model's state_dict there, torch.save(model.state_dict(), args.out).",
            details=error,
        )
    return run


def _shared_rename(run, errors) -> str:
    """A rank's os.replace found no file, after two ranks saved that same path (one rank's rename moved it away from
    under the other's); else ""."""
    failed = [rank for rank, type_name, message, _ in errors if type_name == "FileNotFoundError" and " -> " in message]
    if not failed:
        return ""
    writers: dict[str, set[int]] = {}
    for worker in run["runs"]:
        for e in _of(worker["events"], "save"):
            writers.setdefault(e["path"], set()).add(worker["rank"])
    shared = sorted(path for path, ranks in writers.items() if len(ranks) > 1)
    if not shared:
        return ""
    name = _name(shared[0], run.get("ckpt_dir", ""))
    return (
        f"On rank {failed[0]}, a rename (os.replace or os.rename) raised FileNotFoundError: the file to be renamed "
        f"was gone. {_ranks(writers[shared[0]], False).capitalize()} each saved {name} and renamed it, so the first "
        "rank's rename moved the file away from under the other's. Let rank 0 alone write it (`if rank == 0:`; the "
        "ranks' models are identical), then dist.barrier() so no rank moves on before it is on disk."
    )


def _restart_disagrees(restarted: dict[int, list[dict]]) -> str:
    """The restarted ranks resumed from different points (one loaded a checkpoint, another did not), else ""."""
    if not all(_of(ev, "set_epoch") or _steps(ev) for ev in restarted.values()):
        return ""  # a rank stopped before it trained: no resume point to compare
    starts = {rank: _first_epoch(events) for rank, events in restarted.items()}
    loaded = {rank: bool(_of(ev, "load") or _of(ev, "model_load")) for rank, ev in restarted.items()}
    if len(set(starts.values())) <= 1 and len(set(loaded.values())) <= 1:
        return ""
    parts = []
    for rank in sorted(restarted):
        did = "loaded a checkpoint" if loaded[rank] else "loaded no checkpoint"
        began = f" and began at epoch {starts[rank]}" if starts[rank] is not None else ""
        parts.append(f"rank {rank} {did}{began} ({_steps(restarted[rank])} optimizer steps)")
    return (
        " After the restart, " + "; ".join(parts) + ". The ranks resumed from different points, so they ran different "
        "numbers of steps, and a rank with steps left found no other rank in its collectives. "
        "Every rank must restore the model, the optimizer and the epoch (each reads the file, or rank 0 reads it and "
        "broadcasts it, for example with dist.broadcast_object_list)."
    )


# --- what explains a difference from the uninterrupted run -------------------------------------------------------


def _close(value, want: float) -> bool:
    return isinstance(value, (int, float)) and abs(float(value) - want) < 1e-9


def _initial_weights() -> list[float]:
    """nn.Linear(4, 1)'s weights and bias right after torch.manual_seed(0), flattened as the harness reports them."""
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    return [float(v) for p in model.parameters() for v in p.detach().flatten().tolist()]


def _recipe_notes(first: dict[int, list[dict]]) -> list[str]:
    """Where the workers' first start departed from the prompt's recipe (optimizer, sampler, batches, zero_grad)."""
    notes = []
    for rank, events in sorted(first.items()):
        for e in _of(events, "optimizer")[:1]:
            plain = (
                e.get("type") == "SGD" and _close(e.get("lr"), LR) and _close(e.get("momentum"), MOMENTUM)
                and _close(e.get("weight_decay", 0), 0) and _close(e.get("dampening", 0), 0) and not e.get("nesterov")
            )  # fmt: skip
            if not plain:
                shown = [k for k in ("lr", "momentum") if k in e]
                shown += [k for k in ("dampening", "weight_decay", "nesterov") if e.get(k) not in (None, 0, False)]
                settings = ", ".join(f"{k}={round(e[k], 6) if isinstance(e[k], float) else e[k]}" for k in shown)
                notes.append(
                    f"rank {rank}'s optimizer is {e.get('type')}({settings}); the prompt's is "
                    f"SGD(model.parameters(), lr={LR}, momentum={MOMENTUM})"
                )
                break
        if notes:
            break
    wraps = _of(first.get(0, []), "wrap")
    if wraps and wraps[0]["params"]:
        start = _initial_weights()
        got = wraps[0]["params"]
        if len(got) == len(start) and max(abs(a - b) for a, b in zip(got, start, strict=True)) > 1e-6:
            notes.append(
                f"at the first start, rank 0's model went into DistributedDataParallel with weights "
                f"{[round(v, 4) for v in got]}, not those that torch.manual_seed(0) followed by nn.Linear(4, 1) gives "
                f"({[round(v, 4) for v in start]}), so training began from other weights: call torch.manual_seed(0) "
                "right before building the model (candidates: the seed set after the model was built, or not at all)"
            )
    no_zero = [r for r, ev in sorted(first.items()) if _steps(ev) and not _of(ev, "zero_grad")]
    if no_zero:
        notes.append(
            f"{_ranks(no_zero, False)} never called zero_grad() (on the optimizer or the model): unless the "
            "gradients are cleared some other way, each backward adds to the gradients of the steps before"
        )
    samplers = {r: _of(ev, "set_epoch")[0] for r, ev in first.items() if _of(ev, "set_epoch")}
    for rank, s in sorted(samplers.items()):
        off = []
        if s["seed"] != 0:
            off.append(f"seed={s['seed']}")
        if not s["shuffle"]:
            off.append("shuffle=False")
        if s["num_replicas"] != WORLD:
            off.append(f"num_replicas={s['num_replicas']}")
        if s["rank"] != rank:
            off.append(f"rank={s['rank']}")
        if off:
            notes.append(
                f"rank {rank}'s DistributedSampler has {', '.join(off)}; the prompt's is DistributedSampler(dataset, "
                "shuffle=True, seed=0) on every rank, so that the ranks split one shuffle between them"
            )
    for rank, events in sorted(first.items()):
        sizes = {e["batch_size"] for e in _of(events, "loader")}
        if sizes and BATCH not in sizes:
            notes.append(
                f"rank {rank}'s DataLoader has batch_size={sorted(sizes, key=str)[0]}; the prompt's batches hold "
                f"{BATCH} samples on each rank"
            )
            break
    per_epoch = _steps_per_epoch(first)
    if per_epoch is not None and per_epoch != STEPS_PER_EPOCH:
        notes.append(
            f"rank 0 made {per_epoch} optimizer steps per epoch, where the prompt's run makes {STEPS_PER_EPOCH} "
            f"({N} samples split over {WORLD} ranks, batches of {BATCH} per rank)"
        )
    if first and not any(_of(events, "set_epoch") for events in first.values()):
        notes.append(
            "no rank called sampler.set_epoch(epoch): without it every epoch repeats the first one's order, even in "
            "a run that is never killed"
        )
    return notes


def _resume_notes(attempts: dict[int, dict[int, list[dict]]], *, totals: bool = True) -> list[str]:
    """What the restarted workers did that departs from continuing where the run was cut off."""
    first, restarted = attempts.get(0, {}), attempts[max(attempts)]
    notes = []
    no_load, no_optimizer, from_zero = [], [], []
    for rank, events in sorted(restarted.items()):
        if not (_of(events, "load") or _of(events, "model_load")):
            no_load.append(rank)
        elif not _of(events, "optimizer_load"):
            no_optimizer.append(rank)
        if _first_epoch(events) == 0:
            from_zero.append(rank)
    if no_load and 0 not in no_load and not any(_of(restarted[r], "optimizer_load") for r in no_load):
        notes.append(
            f"{_ranks(no_load)} loaded no checkpoint while restarted rank 0 did. DistributedDataParallel copies rank "
            "0's weights to every rank when it wraps the model, but nothing copies the optimizer's state: "
            f"{_ranks(no_load, False)}'s SGD momentum started again from zero, so the ranks stepped differently. Every "
            "rank must restore the optimizer too (each reads the file, or rank 0 reads it and broadcasts all of it, "
            "for example with dist.broadcast_object_list)"
        )
    elif no_load:
        notes.append(f"{_ranks(no_load)} loaded no checkpoint")
    if no_optimizer:
        notes.append(
            f"{_ranks(no_optimizer)} loaded a checkpoint but never called optimizer.load_state_dict, so SGD's "
            "momentum buffers started again from zero: save optimizer.state_dict() in the checkpoint and restore it "
            "with optimizer.load_state_dict(...) before training on"
        )
    if from_zero:
        notes.append(
            f"{_ranks(from_zero)} began again at epoch 0: store the epoch in the checkpoint and continue with the "
            "one after it"
        )
    kill = _kill_point(first)
    starts = {_first_epoch(ev) for ev in restarted.values()} - {None, 0}
    if kill is not None and len(starts) == 1 and not no_load:
        (start,) = starts
        kill_epoch, kill_steps = kill
        if start < kill_epoch:
            done = {e for e, s in _epochs(first.get(KILL_RANK, [])) if s == STEPS_PER_EPOCH}
            finished = "had finished" if set(range(start, kill_epoch)) <= done else "had begun"
            notes.append(
                f"the restarted ranks began at epoch {start}, though epoch {start} {finished} before the kill (rank "
                f"{KILL_RANK} was killed during epoch {kill_epoch}), so it was trained twice: if the checkpoint "
                "stores the epoch it finished, continue with the one after it (saved epoch + 1)"
            )
        elif start > kill_epoch and kill_steps < STEPS_PER_EPOCH:
            notes.append(
                f"the restarted ranks began at epoch {start}, though rank {KILL_RANK} was killed after only "
                f"{kill_steps} of epoch {kill_epoch}'s {STEPS_PER_EPOCH} steps, so the rest of epoch {kill_epoch} "
                "was never trained: the checkpoint they resumed from claimed more training than had happened. Save "
                "it after the epoch's steps, with the number of the epoch it finished, and continue with the one "
                "after it"
            )
    if totals:
        for rank in sorted(restarted):
            per_attempt = [_steps(attempts[a].get(rank, [])) for a in sorted(attempts)]
            if sum(per_attempt) < TOTAL_STEPS:
                notes.append(
                    f"rank {rank} made {' + '.join(map(str, per_attempt))} = {sum(per_attempt)} optimizer steps "
                    f"(before the kill + after the restart), fewer than the {TOTAL_STEPS} of a run that is never "
                    "killed: some training was skipped"
                )
                break
    return notes


def _sentences(notes: list[str]) -> str:
    return " ".join(note[:1].upper() + note[1:] + "." for note in notes)


def test_run_finishes_after_a_restart(probe):
    _finished(probe)


def test_saves_the_plain_model(probe):
    keys = sorted(_finished(probe)["final"])
    if keys == ["module.bias", "module.weight"]:
        feedback.fail(
            f"--out holds keys {keys}: that is the DistributedDataParallel wrapper's state_dict, which names your "
            "model `module`. Save the plain model's: model.state_dict() (or ddp_model.module.state_dict())."
        )
    if keys != ["bias", "weight"]:
        feedback.fail(f"--out holds keys {keys[:6]}; expected nn.Linear(4, 1)'s: ['bias', 'weight'].")


def test_matches_the_uninterrupted_run(probe):
    run = _finished(probe)
    attempts = _attempts(run)
    final = run["final"]
    if sorted(final) == ["module.bias", "module.weight"]:
        final = {k.removeprefix("module."): v for k, v in final.items()}  # test_saves_the_plain_model says it
    want = reference()
    if sorted(final) != sorted(want):
        feedback.fail(f"--out holds keys {sorted(final)[:6]}, not nn.Linear(4, 1)'s ['bias', 'weight'].")
    got = {k: torch.as_tensor(v).double().reshape(want[k].shape) for k, v in final.items()}
    diff = max(float((got[k] - want[k].double()).abs().max()) for k in want)
    if diff >= TOL:
        notes = _recipe_notes(attempts.get(0, {})) + _resume_notes(attempts)
        if notes:
            seen = " What the grader saw: " + _sentences(notes)
        else:
            seen = (
                " The grader saw nothing it can name. The candidates: a resumed run must continue exactly where the "
                "checkpoint left off (the model's weights, the optimizer's state and the epoch all come back), and "
                "the script must follow the prompt's recipe (seed, SGD settings, batches, loss, set_epoch every "
                "epoch)."
            )
        feedback.fail(
            f"rank 0's final weights differ from a run that was never killed by up to {diff:.3g} (weight "
            f"{[round(v, 4) for v in got['weight'].flatten().tolist()]}, expected "
            f"{[round(v, 4) for v in want['weight'].flatten().tolist()]})." + seen
        )


def _written(attempt: dict[int, list[dict]], ckpt_dir: str) -> list[str]:
    """The names of the files the workers of one attempt put into --ckpt-dir (renamed there, or saved there)."""
    names = []
    for events in attempt.values():
        renamed_from = {e["src"] for e in _of(events, "rename")}
        for e in events:
            if e["event"] == "rename" and _in_ckpt_dir(e["dst"], ckpt_dir):
                names.append(_name(e["dst"], ckpt_dir))
            elif e["event"] == "save" and _in_ckpt_dir(e["path"], ckpt_dir) and e["path"] not in renamed_from:
                names.append(_name(e["path"], ckpt_dir))
    return sorted(set(names))


def test_resumes_within_the_step_budget(probe):
    run = _finished(probe)
    attempts = _attempts(run)
    for rank in range(WORLD):
        per_attempt = [_steps(attempts[a].get(rank, [])) for a in sorted(attempts)]
        total = sum(per_attempt)
        if total <= STEP_BUDGET:
            continue
        restarted = attempts[max(attempts)]
        loaded = any(_of(ev, "load") or _of(ev, "model_load") for ev in restarted.values())
        written = _written(attempts.get(0, {}), run.get("ckpt_dir", ""))
        if not loaded and written:
            cause = (
                f"Before the kill your script wrote {', '.join(written[:4])} into --ckpt-dir, but no restarted "
                "worker loaded a checkpoint, so they trained from scratch: every step before the kill was lost. When "
                "the script starts, it must find that file and load it; the candidates are a check that looks for "
                "another name or in another folder, and a condition that is never true."
            )
        elif not loaded:
            cause = (
                "The restarted workers loaded nothing, so they trained from scratch: every step before the kill was "
                "lost. Save a checkpoint (the model's and the optimizer's state_dict and the epoch) at the end of "
                "every epoch into --ckpt-dir, and when the script starts, load it if it is there."
            )
        else:
            notes = [n for n in _recipe_notes(attempts.get(0, {})) if "per epoch" in n or "batch_size" in n]
            notes += [n for n in _resume_notes(attempts, totals=False) if "loaded no checkpoint" not in n]
            cause = (
                "What the grader saw: " + _sentences(notes)
                if notes
                else "The restarted workers loaded a checkpoint, yet trained more steps than were left."
            )
        feedback.fail(
            f"rank {rank} made {' + '.join(map(str, per_attempt))} = {total} optimizer steps (before the kill + after "
            f"the restart); an uninterrupted run makes {TOTAL_STEPS}, and one that resumes from its last epoch's "
            f"checkpoint redoes at most the {STEPS_PER_EPOCH} steps of the epoch that was cut short: {STEP_BUDGET} at "
            f"most. {cause}"
        )


def test_one_writer_per_checkpoint_file(probe):
    run = _finished(probe)
    writers: dict[str, set[int]] = {}
    for worker in run["runs"]:
        for e in _of(worker["events"], "save"):
            writers.setdefault(e["path"], set()).add(worker["rank"])
    shared = {path: ranks for path, ranks in writers.items() if len(ranks) > 1}
    if shared:
        path, ranks = next(iter(sorted(shared.items())))
        feedback.fail(
            f"{_ranks(ranks, False).capitalize()} each wrote {_name(path, run.get('ckpt_dir', ''))}. torch.save "
            "writes straight into the file, so two ranks saving one path at the same moment can leave it mixed or "
            "cut short, and a restart then finds a checkpoint that does not load. Let rank 0 alone write it (`if "
            "rank == 0:`; the ranks' models are identical), then dist.barrier() so no rank moves on before it is on "
            "disk."
        )


def test_checkpoint_replaced_whole(probe):
    """Each checkpoint torch.save writes into --ckpt-dir is written under a temporary name and renamed onto its own."""
    run = _finished(probe)
    ckpt_dir = run.get("ckpt_dir", "")
    for worker in run["runs"]:
        events = worker["events"]
        ended = bool(_of(events, "end"))
        saves = [i for i, e in enumerate(events) if e["event"] == "save" and _in_ckpt_dir(e["path"], ckpt_dir)]
        for i in saves:
            path = events[i]["path"]
            if any(e["event"] == "rename" and e["src"] == path for e in events[i + 1 :]):
                continue
            if not ended and i == saves[-1]:
                continue  # stopped (killed or terminated) between its last save and the rename that would follow
            attempt = "restarted " if worker["attempt"] else ""
            feedback.fail(
                f"{attempt}rank {worker['rank']} wrote the checkpoint {_name(path, ckpt_dir)} with torch.save "
                "straight under the name it keeps, and never renamed it onto another. torch.save writes a file "
                "piece by piece, so a worker killed while saving leaves it cut short, and the restart then finds a "
                "checkpoint that does not load. Save to a temporary name in --ckpt-dir, then os.replace(tmp, path): "
                "the rename puts the whole file in place at once, and the previous checkpoint stays whole until then."
            )
