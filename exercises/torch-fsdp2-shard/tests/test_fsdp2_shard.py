"""Hidden tests for torch-fsdp2-shard: two real ranks, FSDP2 over gloo, measured.

The training runs once per grading job (the first test that needs it), with runner.vdev.comm recording every
collective and probes.py observing each rank's training (``observed``: the parameters at every step, the optimizer,
the FSDP groups, the gradients between backward and step, the learner's own collectives apart from FSDP's, what
shard() and train() returned); each test then reads the same results. The accuracy is computed here from rank 0's
returned state dict. Messages name a cause where the probe observed it, and otherwise say what was observed and
name the candidates as such.

Figures computed by hand from build_model(): its Linear layers hold 32 * 128 + 128 = 4,224, 128 * 128 + 128 =
16,512 (twice) and 128 * 4 + 4 = 516 float32 values, 37,764 in all: 151,056 bytes. Every dimension 0 is even, so
FSDP2's dim-0 shards split each tensor exactly in half: 75,528 bytes per rank. With one group per layer a rank's
largest all-gather sends its half of a 128 x 128 layer, 33,024 bytes; with the root as the only group it sends its
whole 75,528 at once (exercises/FACTS.md P41).
"""

import re

import pytest
import torch
from probes import BATCH, COLLECTIVE_TIMEOUT_S, EPOCHS, LR, N_TRAIN, N_VAL, build_model, make_dataset
from runner import feedback

WORLD = 2
TIMEOUT_S = 90.0  # the ranks need a few seconds; a loaded grader has taken over 80 (576 collectives, each a wait)
STEPS = EPOCHS * (N_TRAIN // WORLD) // BATCH  # 8 steps per epoch and rank
LAYERS = [32 * 128 + 128, 128 * 128 + 128, 128 * 128 + 128, 128 * 4 + 4]
LINEARS = ["0", "2", "4", "6"]  # build_model()'s Linear layers, by name
FULL_BYTES = 4 * sum(LAYERS)  # 151,056
SHARD_BYTES = FULL_BYTES // WORLD  # 75,528
LARGEST_GATHER = 4 * max(LAYERS) // WORLD  # 33,024
TARGET_ACCURACY = 0.75
DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16}
_cache: dict = {}

COLLECTIVE_HINT = (
    "Gathering the full state dict (get_model_state_dict with full_state_dict=True, or DTensor.full_tensor()) is "
    "a collective: call it on every rank, and let rank 0 keep the result (with cpu_offload=True the other ranks get "
    "an empty dict)."
)


def _runs(probe):
    if not _cache:
        try:
            _cache["runs"] = probe("run", world_size=WORLD, timeout_s=TIMEOUT_S)
        except Exception as exc:
            _cache["runs"] = exc
    runs = _cache["runs"]
    if isinstance(runs, Exception):
        feedback.fail(feedback.raised(f"running train on {WORLD} ranks", type(runs).__name__, str(runs)))
    return runs


def _observed(r) -> dict:
    """What rank r's probe observed ({} when the rank wrote nothing)."""
    return r.get("observed") or {}


def _steps(r) -> int:
    return len(_observed(r).get("params") or [])


def _details(runs) -> str:
    return "\n".join(f"rank {r['rank']}: {r['error']['type']}: {r['error']['message']}" for r in runs if r["error"])


def _is_collective_failure(r) -> bool:
    e = r["error"]
    known = feedback.classify(e["type"], e["message"]) if e else None
    return bool(known and known[0].id.startswith("collective."))


def _own_failure(runs):
    """An observed cause of a rank's own exception, or None."""
    errors = [r for r in runs if r["error"]]
    for r in errors:
        e = r["error"]
        where = "every rank" if len(errors) == len(runs) else f"rank {r['rank']}"
        shard = _observed(r).get("shard")
        none = re.search(r"'NoneType' object has no attribute '(\w+)'", e["message"])
        if none and shard and shard[0] == "NoneType":
            return (
                f"train on {where} raised AttributeError: it used .{none[1]} of None. shard(model) returned None "
                "(it ends without `return model`), and train() used what shard returned: end shard() with "
                "`return model`."
            )
        if none:
            return (
                f"train on {where} raised AttributeError: it used .{none[1]} of a value that is None (a variable "
                "that was never set, or a function that ended without `return`, which gives None)."
            )
        if e["type"] == "ValueError" and "can't optimize a non-leaf Tensor" in e["message"]:
            return (
                f"train on {where} raised ValueError when the optimizer was built: it was given tensors computed "
                "from the parameters (not leaves of autograd), such as p.to_local() of a sharded parameter, and "
                "torch.optim accepts only leaf tensors. Give it the sharded model's parameters themselves, "
                "torch.optim.AdamW(model.parameters(), lr=LR): each is a DTensor that holds this rank's shard, so "
                "the optimizer already steps only the shards."
            )
        module = re.search(r"'(FSDP\w+)' object has no attribute 'module'", e["message"])
        if module:
            return (
                f"train on {where} raised AttributeError: your code looked for .module on the sharded model (a "
                f"{module[1]}). fully_shard wraps nothing, unlike DistributedDataParallel: it changes the model's "
                "class in place and keeps its layers, so there is no .module to unwrap. Pass the model itself "
                "(get_model_state_dict(model, ...))."
            )
    return None


def _rank_failure(runs) -> feedback.Explained:
    """Explain why some ranks did not return a result: an observed cause where the probe isolated one."""
    steps = {r["rank"]: _steps(r) for r in runs}
    told = ", ".join(f"rank {k} {v}" for k, v in steps.items())
    own = _own_failure(runs)
    if own:
        return feedback.Explained(own, _details(runs))
    if all(r["timed_out"] for r in runs):
        text = (
            f"Neither rank finished within {TIMEOUT_S:g} s (the reference needs a few seconds); optimizer steps made: "
            f"{told} of {STEPS}. Either a rank waited in a collective the other never joined, or the run was far too "
            "slow (on an overloaded grader, submit again)."
        )
        if all(v == STEPS for v in steps.values()):
            text += (
                " Both had finished training: after the loop the ranks run only the full state dict's gather and "
                "any collectives of your own. " + COLLECTIVE_HINT
            )
        return feedback.Explained(text + _own_mismatch(runs), _details(runs))
    errors = {(r["error"]["type"], r["error"]["message"]) for r in runs if r["error"]}
    if len(errors) == 1 and all(r["error"] for r in runs):
        explained = feedback.raised("train on every rank", *errors.pop())
    else:
        explained = feedback.ranks(runs, what="train", timeout_s=TIMEOUT_S)
    text = explained.message
    waited = [r for r in runs if r["timed_out"] or _is_collective_failure(r)]
    if waited:
        if all(steps[r["rank"]] == STEPS for r in waited):
            who = " and ".join(f"rank {r['rank']}" for r in waited)
            text += (
                f" {who[:1].upper()}{who[1:]} had made all {STEPS} optimizer steps, so the collective it waited in "
                "came after the training loop, where the ranks run only the full state dict's gather and any "
                f"collectives of your own (a rank waits at most {COLLECTIVE_TIMEOUT_S:g} s for another here). "
                + COLLECTIVE_HINT
            )
        else:
            text += f" Optimizer steps made: {told} of {STEPS}."
        text += _own_mismatch(runs)
    return feedback.Explained(text, explained.details or _details(runs))


def _own_mismatch(runs) -> str:
    """The collectives of the learner's own code (not FSDP's or the state dict's), where the ranks called them a
    different number of times; else ""."""
    calls = {r["rank"]: (_observed(r).get("own") or {}).get("ops") or {} for r in runs}
    ops = sorted({op for c in calls.values() for op in c})
    uneven = [op for op in ops if len({c.get(op, 0) for c in calls.values()}) > 1]
    if not uneven:
        return ""
    op = uneven[0]
    counts = ", ".join(f"rank {rank} {c.get(op, 0)}" for rank, c in sorted(calls.items()))
    return (
        f" Collectives of your own code (not FSDP's): {op} was called a different number of times by the ranks "
        f"({counts}), so a rank waited in it for a partner that never came, or the ranks' collectives paired up "
        "wrongly. A collective in a branch only some ranks take (`if rank == 0:` around a dist.all_reduce for "
        "logging, for example) does this: call it on every rank and keep only the print under the rank check."
    )


def _ok_ranks(probe):
    runs = _runs(probe)
    if any(r["timed_out"] or r["error"] or r["destroyed"] is None for r in runs):
        feedback.fail(_rank_failure(runs))
    for r in runs:
        if not r["comm"] or not _observed(r).get("params"):
            pytest.fail(
                f"rank {r['rank']} reported no optimizer steps: train() must step an optimizer, through the probe, "
                "unchanged"
            )
    return runs


def _ops(counts: dict) -> str:
    return ", ".join(f"{n} {op}" for op, n in sorted(counts.items()))


def test_every_rank_finishes(probe, measure):
    runs = _ok_ranks(probe)
    steps = runs[0]["comm"]["steps"]
    measure.record("optimizer steps per rank", steps, unit="steps", target=STEPS, compare="==")
    own = _observed(runs[0]).get("own") or {}
    measure.record("collectives of your own (rank 0)", own.get("calls", 0), unit="calls")
    if own.get("calls"):
        measure.record("bytes sent by collectives of your own (rank 0)", own.get("bytes", 0), unit="B")
    assert steps == STEPS, (
        f"rank 0 made {steps} optimizer steps; expected {STEPS} ({EPOCHS} epochs of {N_TRAIN // WORLD // BATCH} "
        "batches). Keep the starter's training loop: the exercise is sharding and saving."
    )


def test_parameters_are_sharded(probe, measure):
    runs = _ok_ranks(probe)
    for r in runs:
        p = _observed(r)["params"][-1]
        if p["model_dtensors"] != p["model_params"]:
            pytest.fail(
                f"rank {r['rank']}: {p['model_params'] - p['model_dtensors']} of the model's {p['model_params']} "
                "parameters are plain tensors, whole on every rank. fully_shard(module) turns the parameters it "
                "manages into DTensors sharded on dim 0: call it on the layers and on the root in shard()."
            )
    held = _observed(runs[0])["params"][-1]["model_bytes"]
    measure.record("parameter bytes held by rank 0", held, unit="B", target=SHARD_BYTES, compare="<=")
    for r in runs:
        held = _observed(r)["params"][-1]["model_bytes"]
        assert held == SHARD_BYTES, (
            f"rank {r['rank']} holds {held:,} bytes of the model's parameters; the whole model is {FULL_BYTES:,} "
            f"bytes, so each of {WORLD} ranks should hold {SHARD_BYTES:,}."
        )


def test_optimizer_steps_the_shards(probe, measure):
    runs = _ok_ranks(probe)
    obs = _observed(runs[0])
    p = obs["params"][-1]
    measure.record("parameter bytes the optimizer holds (rank 0)", p["opt_bytes"], unit="B", target=SHARD_BYTES,
                   compare="<=")  # fmt: skip
    if not p["same"] and p["opt_dtensors"] == 0 and p["model_dtensors"]:
        pytest.fail(
            f"the optimizer holds {p['opt_params']} plain tensors ({p['opt_bytes']:,} bytes on rank 0), not the "
            f"model's sharded parameters: {p['opt_grads']} of them had a gradient at the last step, so the optimizer "
            "never changed the model, and it keeps the full unsharded tensors alive. fully_shard replaces every "
            "parameter it manages with a new DTensor parameter: create the optimizer after fully_shard, from "
            "model.parameters()."
        )
    if not p["same"]:
        pytest.fail(
            f"rank 0's optimizer holds {p['opt_params']} parameters ({p['opt_dtensors']} DTensors) and the model "
            f"{p['model_params']} ({p['model_dtensors']} DTensors), not the same objects: build the optimizer from "
            "model.parameters() after sharding, so that it steps each rank's shards of every parameter."
        )
    if p["opt_grads"] != p["opt_params"]:
        pytest.fail(
            f"only {p['opt_grads']} of the optimizer's {p['opt_params']} parameters had a gradient at rank 0's last "
            "step: every step comes after a backward of the loss, as in the starter's loop."
        )
    seen = obs.get("optimizer") or []
    wrong = [s for s in seen if s[0] != "AdamW" or [round(lr, 12) for lr in s[1]] != [LR]]
    if wrong:
        kind, lrs = wrong[0]
        said = ", ".join(f"{lr:g}" for lr in lrs)
        scaled = " (LR times the number of ranks)" if lrs == [LR * WORLD] else ""
        pytest.fail(
            f"rank 0 stepped a {kind} optimizer with lr={said}{scaled}; the task fixes torch.optim.AdamW(..., "
            f"lr=LR), LR = {LR:g}. FSDP's reduce-scatter already averages the gradients over the ranks, so each "
            "step is the one a single process would make on the ranks' batches together: the learning rate stays LR."
        )
    grads = obs.get("grads") or {}
    if grads.get("changed"):
        own = obs.get("own") or {}
        text = (
            f"at {grads['changed']} of rank 0's {grads['compared']} steps the optimizer stepped gradients that differ "
            "from the ones backward() left (compared right after backward() and again before optimizer.step())."
        )
        if own.get("after_backward"):
            text += (
                f" In between, your code ran {own['after_backward']} collectives of its own on rank 0 "
                f"({own['after_backward_bytes']:,} bytes). FSDP's backward already reduce-scatters the gradients, "
                "averaged over the ranks, so each rank's shard holds its slice's averaged gradient; rank 0 holds rows "
                "0-63 of each weight and rank 1 rows 64-127, so an all-reduce of the local shards adds up different "
                "rows. Leave the gradients as backward() leaves them."
            )
        elif grads.get("scales") and all(s is not None and abs(s - 1 / WORLD) < 1e-5 for s in grads["scales"]):
            text += (
                f" Every stepped gradient was the one backward() left times 1/{WORLD}: divided by the number of ranks "
                "a second time. FSDP's reduce-scatter already averages the gradients over the ranks, so each rank's "
                "shard holds the averaged gradient: leave the gradients as backward() leaves them."
            )
        elif grads.get("scales") and all(s is not None for s in grads["scales"]):
            factors = ", ".join(f"{s:g}" for s in grads["scales"])
            text += (
                f" Every stepped gradient was the one backward() left times one factor ({factors}): something scaled "
                "them (for example a division or multiplication of p.grad). FSDP's reduce-scatter already averages "
                "the gradients over the ranks: leave them as backward() leaves them."
            )
        else:
            text += (
                " Something between the two changed them (clipping, scaling or an in-place edit of p.grad, for "
                "example): keep the starter's loop, which steps the gradients FSDP reduce-scattered."
            )
        pytest.fail(text)


def _group_text(group) -> str:
    name, params = group[0], group[1]
    owner = "the model itself" if name == "" else f"model[{name}]"
    return f"{owner}: {', '.join(params) if params else 'no parameters'}"


def test_one_group_per_layer(probe):
    runs = _ok_ranks(probe)
    groups = _observed(runs[0]).get("groups") or []
    if any(g[0] == "?" for g in groups):
        return  # the probe could not read FSDP's groups (a torch it does not know): test_gathers_layer_by_layer decides
    observed = "; ".join(_group_text(g) for g in groups) or "none"
    by_name = {g[0]: g for g in groups}
    layer_of = {p: p.split(".")[0] for g in groups for p in g[1]}
    mixed = [g for g in groups if len({layer_of[p] for p in g[1]}) > 1]  # fully_shard on the root alone, or on a list
    if mixed:
        g = mixed[0]
        layers = sorted({layer_of[p] for p in g[1]})
        pytest.fail(
            f"one FSDP group ({_group_text(g)}) holds the parameters of {len(layers)} Linear layers "
            f"({', '.join(layers)}): a group is gathered in one collective, so those layers are rebuilt together. "
            f"Groups observed on rank 0: {observed}. fully_shard each Linear layer first, then the model itself: "
            "the root then takes no parameters of its own."
        )
    missing = [name for name in LINEARS if name not in by_name]
    if missing:
        owner = {p: ("the model itself" if g[0] == "" else f"model[{g[0]}]") for g in groups for p in g[1]}
        taken = [f"model[{m}]'s parameters went into the group of {owner[m + '.weight']}" for m in missing
                 if m + ".weight" in owner]  # fmt: skip
        pytest.fail(
            f"{', '.join(f'model[{m}]' for m in missing)} got no fully_shard call of its own"
            + (f": {'; '.join(taken)}" if taken else "")
            + f". Groups observed on rank 0: {observed}. Shard all four Linear layers, model[0], model[2], model[4] "
            "and model[6], each by its own fully_shard call, then the model itself."
        )
    if "" not in by_name:
        roots = [name for name in LINEARS if by_name[name][2]]
        kept = [name for name in LINEARS if by_name[name][3] is False]
        text = (
            f"the model itself was never passed to fully_shard (groups observed on rank 0: {observed})."
            " The task shards each Linear layer and then the model, the root."
        )
        if roots:
            text += (
                f" Without it FSDP made {len(roots)} of the layers roots of their own"
                + (
                    f", and a root keeps its parameters gathered after its forward (observed for "
                    f"{', '.join(f'model[{n}]' for n in kept)}), so those layers stay gathered until their backward"
                    if kept
                    else ""
                )
                + "."
            )
        pytest.fail(text + " Call fully_shard(model) after the loop over the layers.")


def test_gathers_layer_by_layer(probe, measure):
    runs = _ok_ranks(probe)
    gathered = _observed(runs[0]).get("fsdp_gathers") or {}
    largest = int(gathered.get("largest", 0))
    measure.record("FSDP all-gathers per step (rank 0)",
                   round(gathered.get("calls", 0) / max(1, runs[0]["comm"]["steps"]), 2), unit="calls")  # fmt: skip
    measure.grade(
        "largest all-gather rank 0 sends",
        largest,
        unit="B",
        target=LARGEST_GATHER,
        compare="<=",
        zero_at=SHARD_BYTES,
        message=(
            f"rank 0's largest FSDP all-gather sent {largest:,} bytes, its shard of the whole model "
            f"({SHARD_BYTES:,} bytes): every rank rebuilds all {FULL_BYTES:,} bytes of parameters at once before "
            "the forward. One fully_shard call makes one group, gathered in one collective; fully_shard each "
            f"Linear layer first and the root last, so that each all-gather fetches one layer (at most "
            f"{LARGEST_GATHER:,} bytes sent)."
            if largest >= SHARD_BYTES
            else f"rank 0's largest FSDP all-gather sent {largest:,} bytes; with one group per Linear layer it sends "
            f"at most {LARGEST_GATHER:,}, so one group holds more than one layer."
        ),
    )


def test_full_state_dict_on_rank_0(probe):
    runs = _ok_ranks(probe)
    r0, others = runs[0], runs[1:]
    obs0 = _observed(r0)
    want = {k: list(v.shape) for k, v in build_model().state_dict().items()}
    for r in runs:
        returned = _observed(r).get("returned")
        if returned and not returned[1]:
            pytest.fail(
                f"train on rank {r['rank']} returned {returned[0]}, not a dict: return what full_state_dict(model) "
                "returned (the full state dict on rank 0, {} on the other ranks)."
            )
    if obs0.get("dtensors"):
        names = obs0["dtensors"]
        got = {k: r0["state"][k]["shape"] for k in names[:2] if k in r0["state"]}
        full = {k: want.get(k) for k in got}
        pytest.fail(
            f"rank 0 returned DTensors ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''}): its own shards, "
            f"such as {got} of {full}. model.state_dict() of a sharded model holds each "
            "rank's shards; use get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, "
            "cpu_offload=True)) on every rank for the whole model as plain tensors on rank 0."
        )
    if obs0.get("non_tensors"):
        odd = ", ".join(f"{k} ({t})" for k, t in obs0["non_tensors"][:4])
        pytest.fail(f"rank 0's state dict holds entries that are not tensors: {odd}; expected plain tensors only.")
    got = {k: v["shape"] for k, v in r0["state"].items()}
    if got != want:
        halves = set(got) == set(want) and all(
            got[k][0] * WORLD == want[k][0] and got[k][1:] == want[k][1:] for k in want
        )
        if halves:
            pytest.fail(
                "rank 0 returned build_model()'s keys with half of every tensor along dim 0 (0.weight "
                f"{got['0.weight']} of {want['0.weight']}, 6.weight {got['6.weight']} of {want['6.weight']}): rank 0's "
                "own shards, as DTensor.to_local() gives them. Gather the whole tensors on every rank "
                "(get_model_state_dict with full_state_dict=True, or full_tensor() of each entry) and return them on "
                "rank 0."
            )
        pytest.fail(f"rank 0 returned keys and shapes {got}; expected build_model()'s state_dict {want}")
    dtypes = obs0.get("dtypes") or {k: v["dtype"] for k, v in r0["state"].items()}
    odd = {k: v for k, v in dtypes.items() if v != "float32"}
    if odd:
        kinds = sorted(set(odd.values()))
        pytest.fail(
            f"rank 0 returned {', '.join(kinds)} tensors ({', '.join(list(odd)[:3])}{', ...' if len(odd) > 3 else ''})"
            "; the task asks for plain float32 tensors, the dtype the model trains in: return the gathered tensors "
            "without casting them."
        )
    for r in others:
        if r["state"]:
            pytest.fail(
                f"rank {r['rank']} returned {len(r['state'])} tensors; expected {{}}: only rank 0 keeps the full "
                "state dict. get_model_state_dict with StateDictOptions(full_state_dict=True, cpu_offload=True) gives "
                "the other ranks {} by itself; without cpu_offload every rank gets all of it, so return {} on them."
            )


def test_accuracy_target(probe, measure):
    runs = _ok_ranks(probe)
    state = runs[0]["state"]
    want = build_model().state_dict()
    if {k: v["shape"] for k, v in state.items()} != {k: list(v.shape) for k, v in want.items()} or any(
        v["dtype"] not in DTYPES for v in state.values()
    ):
        pytest.fail("rank 0 did not return build_model()'s full state dict, so there are no weights to evaluate")
    model = build_model()
    model.load_state_dict({
        k: torch.frombuffer(bytearray(v["bytes"]), dtype=DTYPES[v["dtype"]]).reshape(v["shape"]).float().clone()
        for k, v in state.items()
    })  # fmt: skip
    x, y = make_dataset()
    with torch.no_grad():
        accuracy = float((model(x[N_TRAIN:]).argmax(dim=1) == y[N_TRAIN:]).float().mean())
    measure.grade(
        "validation accuracy (rank 0's state dict)",
        round(accuracy, 4),
        target=TARGET_ACCURACY,
        compare=">=",
        zero_at=0.3,
        message=(
            f"rank 0's weights classify {accuracy:.1%} of the {N_VAL} validation samples; the target is "
            f"{TARGET_ACCURACY:.0%} (the reference reaches about 84%, the untrained model 27%). Step the optimizer "
            "on the model's sharded parameters and keep the starter's loop."
        ),
    )
