"""Hidden tests for torch-elastic-resume: the learner's script under the real torchrun, rank 1 killed once.

The probe runs `torchrun --standalone --nproc-per-node 2 --max-restarts 1` on the script once per grading job
(the first test that needs it); every test reads the same run. Rank 1 is SIGKILLed right after its optimizer step
KILL_STEP in the first attempt (epoch 3 of 0-5, its second step); torchrun then restarts both workers. The judge
computes the uninterrupted run itself (reference below) and compares rank 0's final weights with it.
"""

import pytest
import torch
from probes import BATCH, EPOCHS, LR, MOMENTUM, STEPS_PER_EPOCH, WORLD, dataset
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
    samplers = [DistributedSampler(range(len(x)), num_replicas=WORLD, rank=r, shuffle=True, seed=0) for r in range(WORLD)]
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
            for p, *per_rank in zip(model.parameters(), *grads):
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
        pytest.fail(f"launching your script with torchrun failed before it could be observed: {type(run).__name__}: {run}")
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


def _error(rank, events) -> str:
    errors = _of(events, "error")
    if not errors:
        return ""
    e = errors[-1]
    line = f" (line {e['line']} of your script)" if e.get("line") else ""
    return f"rank {rank} raised {e['type']}: {e['message'][:500]}{line}"


def _why_restart_failed(errors: list[str]) -> str:
    text = " ".join(errors)
    if "module." in text and ("Missing key" in text or "Unexpected key" in text):
        return (
            " The checkpoint's keys start with 'module.': it was saved from the DistributedDataParallel wrapper "
            "(ddp_model.state_dict()), whose keys name the wrapped model as `module`, and loaded into the plain "
            "model. Save the plain model's state_dict (model.state_dict(), or ddp_model.module.state_dict()) "
            "so it loads into the model a restarted worker builds."
        )
    return ""


def _last_seen(attempts) -> str:
    """Where each worker's log ends: `attempt 1 rank 0: after optimizer step 3`."""
    parts = []
    for attempt, ranks in sorted(attempts.items()):
        for rank, events in sorted(ranks.items()):
            steps = _steps(events)
            last = events[-1]["event"] if events else "start"
            what = {"end": "finished", "killed": "killed by the grader", "error": "raised", "timed_out": "stopped"}.get(
                last, f"after optimizer step {steps}" if steps else "before its first optimizer step"
            )
            parts.append(f"{'restarted ' if attempt else ''}rank {rank}: {what}")
    return "; ".join(parts)


def _finished(probe) -> dict:
    """The run, once it is known to have finished after a restart with rank 0's weights written; else fail."""
    run = _run(probe)
    attempts = _attempts(run)
    if not attempts:
        pytest.fail(
            f"torchrun started no worker (exit code {run['exit_code']}), so your script never ran: this is a "
            "problem of the grader, not of your script. Please report it."
        )
    if run["timed_out"]:
        seen = _last_seen(attempts)
        if "before its first optimizer step" in seen:
            why = (
                "A worker that never made a step was still starting: each is a new Python process that imports torch "
                "and joins the group, which takes seconds, and minutes on a busy grading machine. If your script "
                "does no slow work before its first step, submit it again."
            )
        else:
            why = (
                "A worker that stops making steps is usually waiting in a collective the other rank never joins: "
                "after the restart, every rank must resume from the same checkpoint and run the same number of steps."
            )
        pytest.fail(f"the run did not finish within {RUN_TIMEOUT_S:.0f} s ({seen}). {why}")
    first = attempts.get(0, {})
    if not any(_of(events, "killed") for events in first.values()):
        errors = [e for r, events in sorted(first.items()) if (e := _error(r, events))]
        if errors:
            pytest.fail("your script failed before any rank was killed: " + "; ".join(errors) + ".")
        ran = _steps(first.get(KILL_RANK, []))
        pytest.fail(
            f"rank {KILL_RANK} was to be killed after its optimizer step {KILL_STEP}, but it made only {ran} steps "
            f"(torchrun exit code {run['exit_code']}). Train {EPOCHS} epochs of {STEPS_PER_EPOCH} steps on each rank "
            "(64 samples, batches of 8 per rank, a DistributedSampler over 2 ranks)."
        )
    last = max(attempts)
    if last == 0:
        pytest.fail(
            f"rank {KILL_RANK} was killed and torchrun never restarted the workers (exit code {run['exit_code']}; "
            f"{_last_seen(attempts)})."
        )
    if run["exit_code"] != 0:
        errors = [e for r, events in sorted(attempts[last].items()) if (e := _error(r, events))]
        if not errors:
            pytest.fail(
                f"torchrun exited with code {run['exit_code']} after the restart ({_last_seen(attempts)}), and no "
                "restarted worker raised an exception: a worker that ends with a non-zero exit code or a signal "
                "(sys.exit(1), os._exit, killed for using too much memory) fails the run."
            )
        pytest.fail("the run failed after the restart: " + "; ".join(errors) + "." + _why_restart_failed(errors))
    if not run["final_exists"]:
        pytest.fail(
            f"the run finished after the restart, but nothing was written to --out ({run['out']}). At the end, rank 0 "
            "must save the trained model's state_dict there: torch.save(model.state_dict(), args.out)."
        )
    if run["final"] is None:
        pytest.fail(f"--out could not be read as a state_dict: {run['final_error']}.")
    return run


def test_run_finishes_after_a_restart(probe):
    _finished(probe)


def test_saves_the_plain_model(probe):
    keys = sorted(_finished(probe)["final"])
    if keys == ["module.bias", "module.weight"]:
        pytest.fail(
            f"--out holds keys {keys}: that is the DistributedDataParallel wrapper's state_dict, which names your "
            "model `module`. Save the plain model's: model.state_dict() (or ddp_model.module.state_dict())."
        )
    assert keys == ["bias", "weight"], f"--out holds keys {keys[:6]}; expected nn.Linear(4, 1)'s: ['bias', 'weight']."


def _ranks(ranks: list[int]) -> str:
    return f"restarted rank {ranks[0]}" if len(ranks) == 1 else "restarted ranks " + " and ".join(map(str, ranks))


def _diagnose_resume(restarted: dict[int, list[dict]], first: dict[int, list[dict]] | None = None) -> str:
    """What the workers (events by rank) did that explains a difference from the uninterrupted run."""
    notes = []
    if first is not None and not any(_of(events, "set_epoch") for events in first.values()):
        notes.append(
            "no rank called sampler.set_epoch(epoch): without it every epoch repeats the first one's order, even in "
            "a run that is never killed"
        )
    no_load, no_optimizer, from_zero = [], [], []
    for rank, events in sorted(restarted.items()):
        if not (_of(events, "load") or _of(events, "model_load")):
            no_load.append(rank)
        elif not _of(events, "optimizer_load"):
            no_optimizer.append(rank)
        if [e["epoch"] for e in _of(events, "set_epoch")][:1] == [0]:
            from_zero.append(rank)
    if no_load:
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
    return (" " + "; ".join(notes) + ".") if notes else ""


def test_matches_the_uninterrupted_run(probe):
    run = _finished(probe)
    attempts = _attempts(run)
    final = run["final"]
    if sorted(final) == ["module.bias", "module.weight"]:
        final = {k.removeprefix("module."): v for k, v in final.items()}  # test_saves_the_plain_model says it
    want = reference()
    if sorted(final) != sorted(want):
        pytest.fail(f"--out holds keys {sorted(final)[:6]}, not nn.Linear(4, 1)'s ['bias', 'weight'].")
    got = {k: torch.as_tensor(v).double().reshape(want[k].shape) for k, v in final.items()}
    diff = max(float((got[k] - want[k].double()).abs().max()) for k in want)
    if diff >= TOL:
        pytest.fail(
            f"rank 0's final weights differ from a run that was never killed by up to {diff:.3g} (weight "
            f"{[round(v, 4) for v in got['weight'].flatten().tolist()]}, expected "
            f"{[round(v, 4) for v in want['weight'].flatten().tolist()]}). A resumed run must continue exactly where "
            "the checkpoint left off: the model's weights, the optimizer's state and the epoch all come back (and the "
            "script must follow the prompt's recipe: seed, SGD settings, batches, set_epoch every epoch)."
            + _diagnose_resume(attempts[max(attempts)], attempts.get(0))
        )


def test_resumes_within_the_step_budget(probe):
    run = _finished(probe)
    attempts = _attempts(run)
    for rank in range(WORLD):
        per_attempt = [_steps(attempts[a].get(rank, [])) for a in sorted(attempts)]
        total = sum(per_attempt)
        if total <= STEP_BUDGET:
            continue
        restarted = attempts[max(attempts)].get(rank, [])
        if not (_of(restarted, "load") or _of(restarted, "model_load")):
            cause = (
                "The restarted workers loaded nothing, so they trained from scratch: every step before the kill was "
                "lost. Save a checkpoint (the model's and the optimizer's state_dict and the epoch) at the end of every "
                "epoch into --ckpt-dir, and when the script starts, load it if it is there."
            )
        else:
            cause = _diagnose_resume({rank: restarted}).strip() or (
                "The restarted workers loaded a checkpoint, yet trained more steps than were left."
            )
        pytest.fail(
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
        pytest.fail(
            f"ranks {sorted(ranks)} all wrote {path}. torch.save writes straight into the file, so two ranks saving "
            "one path at the same moment can leave it mixed or cut short, and a restart then finds a checkpoint "
            "that does not load. Let rank 0 alone write it (`if rank == 0:`; the ranks' models are identical), "
            "then dist.barrier() so no rank moves on before it is on disk."
        )
