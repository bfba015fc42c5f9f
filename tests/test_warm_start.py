"""The warm start's parts without a farm: tile adaptation, shape classes, seeds replayed onto other shapes,
the training sample's spread, the setting and the build key."""

from __future__ import annotations

import math
from pathlib import Path

import onnx
import pytest

from db.tuning_records import spread
from orchestrator.plan import plan_jobs
from orchestrator.spec import SpecError, parse_spec
from workers import model_zoo
from workers.tuning import seeding

BASE = '[[models]]\npath = "{model}"\n[axes]\ntuning = [64]\n'


@pytest.mark.parametrize(
    ("decision", "extent"),
    [([1, 4, 2, 8], 12), ([2, 1, 4, 2], 24), ([4, 8, 2, 1], 56), ([1, 4, 1, 16], 7), ([3, 1], 3), ([1, 1, 1, 1], 1)],
)
def test_adapted_tiles_tile_the_new_loop_in_the_old_shape(decision: list[int], extent: int) -> None:
    tiles = seeding.adapt_tile(decision, extent)
    assert math.prod(tiles) == extent, tiles
    assert len(tiles) == len(decision)
    # No inner tile grows past the old one (the vector width and cache tiles keep their size or shrink).
    assert all(new <= max(1, old) for new, old in zip(tiles[1:], decision[1:], strict=True)), tiles


def test_a_tiling_that_fits_is_kept_and_a_misfit_keeps_its_inner_tiles() -> None:
    assert seeding.adapt_tile([2, 1, 4, 2], 16) == [2, 1, 4, 2]
    # MetaSchedule's own fix-up would give [1, 1, 1, 12]: the whole loop as the innermost tile.
    assert seeding.adapt_tile([1, 4, 2, 8], 12) == [1, 1, 2, 6]


def test_spread_keeps_the_best_and_an_even_spread_of_the_rest() -> None:
    ids = list(range(100))
    picked = spread(ids, 8, 16)
    assert picked[:8] == list(range(8)) and len(picked) == 16
    assert picked[8] == 8 and picked[-1] == 99, "the fastest and the slowest of the rest"
    assert picked == sorted(set(picked))
    assert spread(ids[:5], 8, 16) == ids[:5], "fewer than asked: all of them"


def _tasks(model: onnx.ModelProto) -> dict[str, object]:
    from tvm.relax.frontend.onnx import from_onnx

    from tvmbench.core.records import TuningSettings
    from workers.tuning.stage import tuning_target
    from workers.tuning.tasks import extract, split_pipeline

    target = tuning_target({"kind": "llvm"}, TuningSettings(num_cores=1))
    front, _ = split_pipeline("per-target", target)
    with target:
        fused = front(from_onnx(model, keep_params_in_input=False))
    extracted, infos = extract(fused, target, "structural")
    return {i.name: extracted[i.index].dispatched[0] for i in infos}


@pytest.fixture(scope="module")
def convs() -> tuple[dict[str, object], dict[str, object]]:
    return _tasks(model_zoo.small_convnet(size=16, channels=8)), _tasks(model_zoo.small_convnet(size=24, channels=12))


def test_convolutions_of_other_shapes_are_one_shape_class(convs) -> None:  # type: ignore[no-untyped-def]
    small, large = convs
    conv = seeding.shape_class(small["fused_conv2d1_add_relu"])
    assert conv is not None and any(name == "conv2d_nchw" and kinds.endswith("RRR") for name, kinds in conv)
    assert seeding.shape_class(large["fused_conv2d1_add_relu"]) == conv
    assert seeding.shape_class(large["fused_conv2d_add_relu"]) == conv, "3 or 12 input channels: one class"
    assert seeding.shape_class(small["fused_matmul_add1"]) != conv
    near = seeding.distance(
        seeding.extents(large["fused_conv2d1_add_relu"]), seeding.extents(small["fused_conv2d1_add_relu"])
    )
    far = seeding.distance(
        seeding.extents(large["fused_conv2d1_add_relu"]), seeding.extents(small["fused_conv2d_add_relu"])
    )
    assert near < far, "12 input channels are nearer 8 than 3"


def _sampled_records(mod: object, n: int) -> list[object]:
    """``n`` schedules of ``mod``'s design space with sampled decisions, as records (no time is measured:
    the replay is what is tested here)."""
    from tvm import s_tir
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.database import TuningRecord, Workload

    from tvmbench.core.records import TuningSettings
    from workers.tuning.preload import preload_tensor_intrin
    from workers.tuning.stage import tuning_target

    preload_tensor_intrin()
    target = tuning_target({"kind": "llvm"}, TuningSettings(num_cores=1))
    context = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply", num_threads=1)
    spaces = context.generate_design_space()
    workload = Workload(mod)
    out = []
    for i in range(n):
        sch = s_tir.Schedule(mod, seed=i + 1)
        s_tir.Trace(spaces[i % len(spaces)].trace.insts, {}).apply_to_schedule(sch, remove_postproc=True)
        out.append(TuningRecord(sch.trace, workload, run_secs=[1e-4 * (i + 1)]))
    return out


def test_seeds_replay_a_neighbours_records_onto_other_shapes(convs) -> None:  # type: ignore[no-untyped-def]
    from tvm.s_tir import meta_schedule as ms

    from tvmbench.core.records import TuningSettings
    from workers.tuning.stage import tuning_target

    small, large = convs
    source = small["fused_conv2d1_add_relu"]
    records = _sampled_records(source, 6)
    neighbour = seeding.Neighbour("small conv", source, records)
    matmul = seeding.Neighbour("matmul", small["fused_matmul_add1"], _sampled_records(small["fused_matmul_add1"], 2))
    seeds = seeding.find_seeds("conv", large["fused_conv2d1_add_relu"], [matmul, neighbour])
    assert seeds is not None and seeds.sources == ["small conv"], "only the shape class lends seeds"
    assert seeds.offered == 6 and 6 <= len(seeds.traces) <= 12, (
        "each record replays (adapted, and as MetaSchedule would)"
    )
    first = seeding.replay(records[0].trace, large["fused_conv2d1_add_relu"], adapt=True)
    assert str(seeds.traces[0].as_json(remove_postproc=True)) == str(first.trace.as_json(remove_postproc=True))
    # Its tiles tile the new loops exactly: MetaSchedule's own fix-up of misfits leaves them as they are.
    again = seeding.replay(seeds.traces[0], large["fused_conv2d1_add_relu"], adapt=False)
    assert str(again.trace.as_json(remove_postproc=True)) == str(seeds.traces[0].as_json(remove_postproc=True))
    target = tuning_target({"kind": "llvm"}, TuningSettings(num_cores=1))
    context = ms.TuneContext(
        mod=large["fused_conv2d1_add_relu"], target=target, space_generator="post-order-apply", num_threads=1
    )
    assert seeding.candidate(seeds.traces[0], context) is not None, "a seed is a measurable candidate of its task"
    assert seeding.find_seeds("matmul", large["fused_matmul_add1"], [neighbour]) is None, "no neighbour, no seeds"


def _spec(tmp_path: Path, extra: str) -> object:
    model = tmp_path / "m.onnx"
    if not model.exists():
        onnx.save(model_zoo.tiny_mlp(), model)
    return parse_spec(BASE.format(model=model) + extra, base=tmp_path)


def test_warm_start_is_on_by_default_and_enters_the_key_only_when_off(tmp_path: Path) -> None:
    default = plan_jobs(_spec(tmp_path, ""))[0]
    on = plan_jobs(_spec(tmp_path, "[tuning]\nwarm_start = true\n"))[0]
    off = plan_jobs(_spec(tmp_path, "[tuning]\nwarm_start = false\n"))[0]
    assert default.tuning_settings.warm_start and not off.tuning_settings.warm_start
    assert "warm_start" not in default.build_config()["tuning"], "tuned keys of before stay the same"
    assert on.build_key("v") == default.build_key("v") and on.key == default.key
    assert off.build_config()["tuning"]["warm_start"] is False
    assert off.build_key("v") != default.build_key("v")


# tiny_cnn tuned (64 trials, random cost model) at opt_level 3 on a target named in full (the host preset's
# mcpu is this machine's), computed on main at bdaff3c, before the setting existed: the default keeps them.
PINNED_TUNED = (
    "663b2942243662be915512babcf12c48f5e9cd1bd9ed611d758aa622fbd7a7c4",
    "26b134f0dedcf2ef9f94d5d9455f2d88bea34d14e8c3f250c4d6f740177d53bb",
)
PINNED_SWEEP = """[[models]]
path = 'tiny_cnn.onnx'
[[targets]]
name = 'pinned'
target = { kind = 'llvm', mcpu = 'znver4' }
board_key = 'pinned'
arch = 'x86_64'
[axes]
executor = ['vm-bytecode']
opt_level = [3]
tuning = [64]
[tuning]
cost_model = 'random'
"""


def test_tuned_jobs_keep_their_keys_of_before_the_setting(models_dir: Path) -> None:
    (job,) = plan_jobs(parse_spec(PINNED_SWEEP, base=models_dir))
    assert (job.key, job.build_key("0.27.0.post1")) == PINNED_TUNED


@pytest.mark.parametrize("value", ["1", '"yes"', "0"])
def test_a_warm_start_that_is_not_a_boolean_names_the_key(tmp_path: Path, value: str) -> None:
    with pytest.raises(SpecError, match=r"tuning\.warm_start") as err:
        _spec(tmp_path, f"[tuning]\nwarm_start = {value}\n")
    assert "true or false" in str(err.value)


def test_results_show_says_what_the_warm_start_did() -> None:
    from tvmbench.answers.tuning_text import tuning_lines

    base = {"budget": 64, "trials_run": 64, "trials_from_records": 0, "cost_model": "xgb", "database": "sql"}
    seeded = [
        {"task": "conv", "from": ["workload 1"], "offered": 8, "accepted": 12, "measured": 4},
        {"task": "conv1", "from": ["conv"], "offered": 4, "accepted": 6, "measured": 2, "ranked": True},
    ]
    warm = {"enabled": True, "trained_on": 120, "workloads": 3, "train_s": 2.0, "note": None, "seeded": seeded}
    (line,) = [x for x in tuning_lines({**base, "warm_start": warm}) if "warm start" in x]
    assert "trained on 120 stored records of 3 workloads (2.0 s)" in line
    assert "2 tasks seeded" in line and "12 records offered" in line and "18 replays accepted" in line
    assert "6 measured, chosen by the cost model in 1 task" in line
    unranked = {**warm, "seeded": seeded[:1]}
    (line,) = [x for x in tuning_lines({**base, "warm_start": unranked}) if "warm start" in x]
    assert "chosen by" not in line, "seeds measured in their source order say nothing of a model"
    off = tuning_lines({**base, "warm_start": {"enabled": False}})
    assert any("warm start: off" in x for x in off)
    assert not any("warm start" in x for x in tuning_lines(base)), "builds tuned before it say nothing"


def test_the_cost_model_learns_the_stored_records_and_ranks_from_the_first_round(convs) -> None:  # type: ignore[no-untyped-def]
    import numpy as np
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.database import TuningRecord

    from tvmbench.core.records import MS_FAILED_RUN_S, TuningSettings
    from workers.tuning.stage import tuning_target
    from workers.tuning.warm_start import ACTIVE_AFTER, measure_order, pretrain, rank_seeds

    small, _ = convs
    mod = small["fused_conv2d1_add_relu"]
    target = tuning_target({"kind": "llvm"}, TuningSettings(num_cores=1))
    context = ms.TuneContext(mod=mod, target=target, num_threads=1)
    sampled = _sampled_records(mod, ACTIVE_AFTER + 8)
    # Times that follow the schedules' own features (no board here): a model wired right learns them back;
    # one given the times of other records (misaligned) could not.
    extractor = ms.feature_extractor.PerStoreFeature()
    features = extractor.extract_from(context, [r.as_measure_candidate() for r in sampled])
    secs = [1e-6 * (1.0 + float(f.numpy().sum())) for f in features]
    records = [TuningRecord(r.trace, r.workload, run_secs=[t]) for r, t in zip(sampled, secs, strict=True)]
    failed = TuningRecord(records[0].trace, records[0].workload, run_secs=[MS_FAILED_RUN_S])
    model, info = pretrain("xgb", [(records[0].workload, "h", [*records, failed])], target, 1)
    assert info == {"trained_on": len(records), "workloads": 1}, "every record but the failed one"
    assert model.num_warmup_samples == 0, "enough stored records: it ranks from the first round"
    scores = model.predict(context, [r.as_measure_candidate() for r in records])
    # A higher score is a faster schedule: scores and times rank the records in opposite orders.
    rho = np.corrcoef(np.argsort(np.argsort(scores)), np.argsort(np.argsort([-t for t in secs])))[0, 1]
    assert rho > 0.5, rho
    # Seeds offered worst first come out in the model's order, its favourite first.
    cands = [r.as_measure_candidate() for r in records]
    ranked, by_model = rank_seeds(cands[::-1], model, context)
    picked = [next(i for i, c in enumerate(cands) if c is r) for r in ranked]
    assert by_model and sorted(picked) == list(range(len(cands)))
    assert [scores[i] for i in picked] == sorted(scores, reverse=True), "the model's favourites are measured first"
    # A first batch of seeds and the search's picks is measured in the model's order as a whole: a seed
    # comes first only where the model scores it above every pick. The slots say where the seeds went.
    seeds, picks = cands[::2][:3], cands[1::2]
    batch, slots = measure_order(seeds, picks, model, context)
    order = [next(i for i, c in enumerate(cands) if c is b) for b in batch]
    assert [scores[i] for i in order] == sorted((scores[i] for i in order), reverse=True)
    assert sorted(order) == sorted([*range(0, 6, 2), *range(1, len(cands), 2)]), "nothing lost or added"
    assert [batch[i] for i in slots] == [c for c in batch if any(c is s for s in seeds)] and len(slots) == 3
    assert slots != [0, 1, 2], "with these scores some pick outranks a seed (else the check says nothing)"
    few, info = pretrain("xgb", [(records[0].workload, "h", records[:4])], target, 1)
    assert info["trained_on"] == 4 and few.num_warmup_samples == 100, "too few: MetaSchedule's warmup stays"
    none, info = pretrain("random", [(records[0].workload, "h", records)], target, 1)
    assert none is None and "learns nothing" in info["note"]
    assert rank_seeds(cands[::-1], few, context) == (cands[::-1], False), "in its warmup: the source order stays"
    assert rank_seeds(cands, "xgb", context) == (cands, False), "a model by name is untrained"
    assert measure_order(seeds, picks, few, context) == ([*seeds, *picks], [0, 1, 2]), "in its warmup: seeds first"
