"""Visible example: runs your script under torchrun on 2 ranks, kills rank 1 once after its 14th step, and prints
what each worker did. The hidden tests check more: the final weights against an uninterrupted run, the step
budget, who wrote the checkpoint."""

from probes import EPOCHS, STEPS_PER_EPOCH


def test_example_survives_a_killed_rank(probe):
    run = probe("launch", kill_rank=1, kill_step=14, timeout_s=420.0)
    for worker in run["runs"]:
        events = worker["events"]
        steps = sum(e["event"] == "step" for e in events)
        ending = next((e for e in reversed(events) if e["event"] in ("killed", "error", "end", "timed_out")), None)
        print(f"attempt {worker['attempt']} rank {worker['rank']}: {steps} steps, ended with {ending}")
    assert run["exit_code"] == 0, f"torchrun exit code {run['exit_code']} (timed out: {run['timed_out']})"
    assert any(w["attempt"] == 1 for w in run["runs"]), "torchrun never restarted the workers"
    assert run["final"] is not None, f"nothing readable in --out: {run['final_error'] or 'no file'}"
    print("final weights:", {k: v.tolist() for k, v in run["final"].items()})
    print(f"an uninterrupted run makes {EPOCHS * STEPS_PER_EPOCH} steps per rank")
