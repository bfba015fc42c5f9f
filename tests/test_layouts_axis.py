"""Data layouts as a sweep axis: ``[axes] layout = ["NCHW", "NHWC"]``.

The fast half: keys without the axis are the ones a sweep had before it (pinned), bad values are one line
and exit 2, the plan multiplies the Relax VM jobs only, and the conversion itself on real imported
modules (a conv net: every conv2d converted; an MLP: a no-op). The sweep half: a real `sweep run` on the
embedded farm (a local tracker and host board it starts, real Ray, SQLite) of a conv net and an MLP under
both layouts beside ONNX Runtime: every job ok (outputs checked against ONNX Runtime), the provenance and
pass trace say what was converted, and `results list/show/best` carry the layout and say which won.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import onnx
import pytest
import tvm_ffi
from typer.testing import CliRunner

from orchestrator.plan import plan_jobs
from orchestrator.spec import SpecError, parse_spec
from tests.conftest import one_error_line, write_sweep
from tvmbench.cli import app
from tvmbench.core.records import LAYOUTS
from workers import layouts, model_zoo
from workers.build_common import relax_type, tvm_versions

runner = CliRunner()

# A sweep of tiny_cnn with an explicit target (the host preset's mcpu is this machine's, so its keys are
# not the same everywhere). Its keys without the axis, computed on main at 584ce76, before the axis.
PLAIN = """
[[models]]
path = 'tiny_cnn.onnx'
[[targets]]
name = 'plain'
target = { kind = 'llvm' }
board_key = 'host'
arch = 'x86_64'
[axes]
executor = ['vm-bytecode', 'onnxruntime']
opt_level = [2]
"""
PINNED = {
    "vm-bytecode": (
        "f607b98457e72dc906c7338e12140b272a35ded2df00fe0697f73d2cd0bfdb13",
        "db7e4f86a0864df14c92b8a3908b99cb53ecb3bcf27b1b1cea961a115bed110c",
    ),
    "onnxruntime": (
        "96e4835536df66fa9863adab0d3883a444773f0840241268746f584f4246e8a6",
        "94d4569541e008483f7d6e7018daf202cb7d316eb4b5ad9fbc0e1fc1e0258f66",
    ),
}
PINNED_SWEEP_ID = "36d74147b586"


def invoke(*args: str) -> object:
    return runner.invoke(app, list(args), catch_exceptions=False)


def with_layouts(text: str, value: str) -> str:
    return text.replace("[axes]\n", f"[axes]\nlayout = {value}\n")


def imported(model: onnx.ModelProto):  # type: ignore[no-untyped-def]
    """The Relax module of ``model`` as the builds import it."""
    from tvm.relax.frontend.onnx import from_onnx

    shapes = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input}
    return from_onnx(model, shape_dict=shapes, keep_params_in_input=False)


# --- keys, spec, plan -----------------------------------------------------------------------------


def test_a_sweep_without_the_axis_keeps_its_keys_and_the_axis_changes_only_the_vm_jobs(models_dir: Path) -> None:
    spec = parse_spec(PLAIN, base=models_dir)
    assert spec.layouts == () and spec.sweep_id == PINNED_SWEEP_ID
    for job in plan_jobs(spec):
        assert job.layout is None and "layout" not in job.build_config()
        assert (job.key, job.build_key("0.27.0.post1")) == PINNED[job.executor], job.executor
    axis = parse_spec(with_layouts(PLAIN, '["NCHW", "NHWC"]'), base=models_dir)
    assert axis.layouts == ("NCHW", "NHWC") and axis.sweep_id != PINNED_SWEEP_ID
    jobs = plan_jobs(axis)
    vm = [j for j in jobs if j.executor == "vm-bytecode"]
    (ort,) = [j for j in jobs if j.executor == "onnxruntime"]  # the baseline is planned once
    assert [j.layout for j in vm] == ["NCHW", "NHWC"]
    assert [j.build_config()["layout"] for j in vm] == ["NCHW", "NHWC"]
    keys = {j.key for j in vm} | {j.build_key("0.27.0.post1") for j in vm}
    assert len(keys) == 4 and not keys & set(PINNED["vm-bytecode"]), "a job of a layout is a job of its own"
    # An "NCHW" job is the module as imported, but a job of the axis: its own key, not the no-axis one.
    assert ort.layout is None and (ort.key, ort.build_key("0.27.0.post1")) == PINNED["onnxruntime"]


def test_plan_has_a_layout_column_only_with_the_axis(models_dir: Path, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'plan.db'}"
    plain = invoke("sweep", "plan", str(write_sweep(tmp_path, PLAIN.replace("tiny_cnn", str(models_dir / "tiny_cnn")))))
    assert plain.exit_code == 0, plain.output
    header = next(line for line in plain.stdout.splitlines() if line.startswith("job "))
    assert " layout " not in f"{header} "
    path = write_sweep(
        tmp_path, with_layouts(PLAIN, '["NHWC", "NCHW"]').replace("tiny_cnn", str(models_dir / "tiny_cnn"))
    )
    shown = json.loads(invoke("sweep", "plan", str(path), "--json", "--db", db).stdout)
    layouts_of = sorted((r["executor"], r.get("layout")) for r in shown["jobs"])
    assert layouts_of == [("onnxruntime", None), ("vm-bytecode", "NCHW"), ("vm-bytecode", "NHWC")]
    assert all("layout" not in r for r in shown["jobs"] if r["executor"] == "onnxruntime")
    text = invoke("sweep", "plan", str(path), "--db", db, "--wide")
    assert text.exit_code == 0, text.output
    header = next(line for line in text.stdout.splitlines() if line.startswith("job "))
    assert " layout " in f"{header} ", text.stdout
    assert "3 program(s) to build" in text.stdout  # one per layout, and the baseline's


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ('["NWHC"]', "axes.layout: 'NWHC' is not valid"),
        ("[3]", "axes.layout: 3 is not valid"),
        ('"nhwc"', "axes.layout: 'nhwc' is not valid"),
        ("[true]", "axes.layout: true is not valid"),
        ("[]", "axes.layout is empty"),
        ('[["NHWC"]]', "axes.layout: ['NHWC'] is not valid"),
    ],
)
def test_a_bad_layout_is_one_line_naming_the_key_exit_2(value: str, says: str, models_dir: Path, home: Path) -> None:
    text = with_layouts(PLAIN, value).replace("tiny_cnn", str(models_dir / "tiny_cnn"))
    line = one_error_line(invoke("sweep", "plan", str(write_sweep(home, text))))
    assert says in line and '"NCHW" or "NHWC"' in line, line


def test_a_layout_axis_no_executor_takes_is_refused(models_dir: Path) -> None:
    text = with_layouts(PLAIN, '["NHWC"]').replace("['vm-bytecode', 'onnxruntime']", "['onnxruntime']")
    with pytest.raises(SpecError) as caught:
        parse_spec(text, base=models_dir)
    message = str(caught.value)
    assert message.startswith("axes.layout: no executor of the sweep converts layouts") and "\n" not in message
    assert "vm-bytecode, vm-compiled" in message


# --- the answers, on stored results (both backends) -----------------------------------------------


def test_best_names_the_winning_layout_and_pairs_tuned_with_untuned_of_the_same_layout(db_url: str) -> None:
    from db.store import ResultStore
    from tests.synthetic import Result, add_sweep, noisy
    from tvmbench.answers import html_report, query, ranking, releases

    store = ResultStore(db_url)
    try:
        tuned = {"budget": 16, "trials_run": 16, "trials_from_records": 0, "tasks": [], "tuning_s": 60.0}
        add_sweep(
            store,
            "layouts1",
            [
                Result(executor="onnxruntime", samples=noisy(1.0, seed=1)),
                Result(layout="NCHW", samples=noisy(8.0, seed=2)),
                Result(layout="NHWC", samples=noisy(6.0, seed=3)),
                Result(layout="NHWC", samples=noisy(2.0, seed=4), tuning=tuned),
            ],
        )
        (row,) = ranking.best(store)
        assert row["best"] == "vm-compiled O2 per-target NHWC tuned 16 (host)" and row["layout"] == "NHWC"
        assert row["runner_up_layout"] == "NHWC"
        won = row["layouts"]
        assert won["winner"] == "NHWC" and not won["uncertain"], won
        assert [(e["layout"], round(e["median"])) for e in won["entries"]] == [("NHWC", 2), ("NCHW", 8)]
        nchw = won["entries"][1]
        assert nchw["ratio_to_best"] == pytest.approx(4.0, rel=0.05) and nchw["ratio_lo"] > 1.0
        assert won["verdict"].startswith("NHWC won: vm-compiled O2 per-target NHWC tuned 16 (host) ")
        assert won["verdict"].endswith("the fastest NCHW (vm-compiled O2 per-target NCHW (host)) is 4 times slower")
        # The tuned NHWC build against the untuned NHWC one, not the NCHW one.
        (side,) = [e for e in row["tuning"] if e["tuning_budget"]]
        assert side["untuned_median"] == pytest.approx(6.0, rel=0.05)
        layouts_of = {r["layout"] for r in query.results(store)}
        assert layouts_of == {None, "NCHW", "NHWC"}
        frame = query.query(store)  # the SQL column reads the job config's layout on either backend
        assert sorted(frame["layout"].dropna()) == ["NCHW", "NHWC", "NHWC"]
        grouped = query.group(frame, ["layout"])
        assert set(grouped["layout"].dropna()) == {"NCHW", "NHWC"}
        configs = {r["config"] for r in releases.releases(store).rows}
        assert "vm-compiled O2 per-target NCHW" in configs and "vm-compiled O2 per-target NHWC" in configs
        # The report's plots keep the layouts apart: a bar per layout, a trials line per layout.
        specs = {p.stem.split("-")[0]: p for p in html_report.plot_specs(html_report.sweep_frame(store, "layouts1"))}
        bars = specs["latency"].draw().axes[0]
        assert {t.get_text() for t in bars.get_xticklabels()} == {"onnxruntime", "vm-compiled NCHW", "vm-compiled NHWC"}
        lines = specs["trials"].draw().axes[0].get_legend_handles_labels()[1]
        assert "vm-compiled NCHW O2 per-target" in lines and "vm-compiled NHWC O2 per-target" in lines, lines
    finally:
        store.close()


# --- the conversion ---------------------------------------------------------------------------------


def test_nhwc_converts_every_conv2d_and_nchw_leaves_the_module_as_imported() -> None:
    mod = imported(model_zoo.tiny_cnn())
    same, kept = layouts.convert(mod, "NCHW")
    assert same is mod and kept == {
        "layout": "NCHW",
        "converted": False,
        "desired": None,
        "convs": 2,
        "convs_converted": 0,
        "other_convs": 0,
        "transposes_added": 0,
        "rewritten": {},
    }
    out, done = layouts.convert(mod, "NHWC")
    assert done["converted"] and done["desired"] == {"relax.nn.conv2d": ["NHWC", "OHWI"]}
    assert (done["convs"], done["convs_converted"]) == (2, 2)
    # The input, two weights, two biases into NHWC and the pooled map back before the flatten.
    assert done["transposes_added"] == 6, done
    text = out.script()
    assert 'data_layout="NCHW"' not in text and 'layout="NHWC"' in text  # the max pool followed the convs
    with pytest.raises(ValueError, match="unknown layout 'NWHC'"):
        layouts.convert(mod, "NWHC")


def test_dropouts_and_variadic_merges_are_rewritten_so_the_module_converts_and_stays_correct() -> None:
    """TVM's ConvertLayout fails on a dropout and on a Sum/Mean of several tensors as the importer writes
    them; the axis rewrites both first, and the NHWC program, built and run here, is ONNX Runtime's."""
    import onnxruntime
    import tvm
    from tvm import relax

    model = model_zoo.merged_branches()
    mod = imported(model)
    with pytest.raises(Exception, match=r"Expected nested to match tuple|can.t find S in source layout"):  # TVM 0.27
        relax.transform.ConvertLayout(layouts.DESIRED["NHWC"])(mod)
    out, done = layouts.convert(mod, "NHWC")
    assert done["rewritten"] == {"dropout": 1, "stacked_reductions": 2}, done
    assert (done["convs"], done["convs_converted"]) == (3, 3), done
    text = out.script()
    assert "R.nn.dropout" not in text and "R.stack" not in text
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype("float32")
    expected = onnxruntime.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    vm = relax.VirtualMachine(relax.build(out, target="llvm"), tvm.cpu())
    np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(x)).numpy(), expected, rtol=1e-4, atol=1e-5)
    assert "R.nn.dropout" in mod.script(), "the module as imported (the NCHW program) was changed"


@pytest.mark.parametrize(
    ("name", "rewritten"), [("light_squeezenet", {"dropout": 1}), ("light_shufflenet", {"stacked_reductions": 13})]
)
def test_the_light_models_convert_to_nhwc(name: str, rewritten: dict[str, int]) -> None:
    """The models the tuning figures are about: before the rewrite, ConvertLayout failed on both."""
    from workers.onnx_model import bundled_path

    _, done = layouts.convert(imported(onnx.load(str(bundled_path(name)))), "NHWC")
    assert done["rewritten"] == rewritten and done["convs_converted"] == done["convs"] > 0, done


def test_a_model_without_conv2d_is_a_no_op_said_so() -> None:
    mod = imported(model_zoo.tiny_mlp())
    out, done = layouts.convert(mod, "NHWC")
    assert done["converted"] and done["convs"] == 0 and done["convs_converted"] == 0
    assert done["transposes_added"] == 0
    assert tvm_ffi.structural_equal(out, mod), "ConvertLayout changed a module without conv2d"


@pytest.mark.parametrize(
    ("channels", "block", "expected"),
    [(64, 16, 16), (3, 8, 3), (3, 4, 3), (1000, 16, 8), (12, 8, 4), (24, 16, 8), (17, 8, 1), (8, 8, 8)],
)
def test_channel_block_is_the_block_where_it_divides_else_all_channels_or_their_common_divisor(
    channels: int, block: int, expected: int
) -> None:
    assert layouts.channel_block(channels, block) == expected


@pytest.mark.parametrize("layout", ["NCHW4c", "NCHW8c", "NCHW16c"])
def test_blocked_layouts_run_the_convolutions_as_nchwc_in_blocks_their_channels_allow_and_stay_correct(
    layout: str,
) -> None:
    """The plain conv becomes TOPI's conv2d_NCHWc in the layout's block; the stem, whose 3 channels no block
    divides, reads NCHW3c and writes the layout's block (no layout transform after it); the grouped one runs
    NCHW between layout transforms. The program, built by the per-target pipeline and run here, is ONNX
    Runtime's."""
    import onnxruntime
    import tvm
    from tvm import relax

    model = model_zoo.grouped_convnet()
    mod = imported(model)
    as_tvm_converts = relax.transform.ConvertLayout(layouts.DESIRED[layout])(mod)
    with pytest.raises(Exception, match=r"cannot be legalized|NCHW.*c"), tvm.transform.PassContext(opt_level=2):
        relax.build(as_tvm_converts, target="llvm")  # what TVM itself does with a blocked conv2d
    with tvm.transform.PassContext(opt_level=2):
        out, done = layouts.convert(mod, layout)
    block = layouts.BLOCKED[layout]
    assert done["desired"] == {"relax.nn.conv2d": [layout, f"OIHW{block}i{block}o"]}, done
    assert (done["convs"], done["convs_converted"], done["grouped_kept"]) == (3, 2, 1), done
    assert done["other_blocks"] == {f"NCHW3c -> {layout}": 1}, done
    kernels = [str(g.name_hint) for g, f in out.functions.items() if isinstance(f, tvm.tirx.PrimFunc)]
    assert sum(k.startswith("conv2d_NCHWc") for k in kernels) == 2, kernels
    shapes = sorted(
        [[int(d) for d in relax_type(t).shape] for t in (call.args[1].fields[0], call)]
        for call in layouts._op_calls(out)
        if call.op.name == "relax.call_tir" and str(call.args[0].name_hint).startswith("conv2d_NCHWc")
    )  # the data and output of both: the stem writes the layout's block straight away
    blocked = [1, 16 // block, 16, 16, block]
    assert shapes == [[[1, 1, 16, 16, 3], blocked], [blocked, blocked]], shapes
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype("float32")
    expected = onnxruntime.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    target = tvm.target.Target("llvm")
    with target, tvm.transform.PassContext(opt_level=2):
        vm = relax.VirtualMachine(tvm.compile(relax.get_default_pipeline(target)(out), target=target), tvm.cpu())
    np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(x)).numpy(), expected, rtol=1e-4, atol=1e-5)
    assert np.abs(expected).max() > 1e-2, "the check compares something"


# --- a toolchain's child ----------------------------------------------------------------------------


def _here() -> object:
    """This interpreter as a toolchain of the interpreter kind: its builds run in a child process."""
    from workers.toolchains.toolchain import Toolchain

    version, ffi = tvm_versions()
    return Toolchain(
        "here", "interpreter", sys.executable, sys.executable, version, ffi,
        extra={"pythonpath": os.environ.get("PYTHONPATH", "")},
    )  # fmt: skip


def test_a_toolchains_child_builds_nhwc_correctly_and_extracts_tuning_tasks_from_the_converted_module(
    models_dir: Path,
) -> None:
    """The child (another release's build path) converts as the worker does: provenance, trace, outputs."""
    import onnxruntime as ort

    from workers.toolchains.build import build_in_toolchain, run_in_toolchain, tasks_in_toolchain

    toolchain = _here()
    spec = parse_spec(with_layouts(PLAIN, '["NCHW", "NHWC"]'), base=models_dir)
    nchw, nhwc = [j for j in plan_jobs(spec) if j.executor == "vm-bytecode"]
    data = (models_dir / "tiny_cnn.onnx").read_bytes()
    build, artifact = build_in_toolchain(toolchain, nhwc, data)
    assert build.status == "ok", build.error
    assert build.layout is not None and build.layout["convs_converted"] == 2
    assert build.pass_trace[0] == "ConvertLayout"
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    outputs, _ = run_in_toolchain(toolchain, artifact, {"x": x})
    (expected,) = ort.InferenceSession(data).run(None, {"x": x})
    np.testing.assert_allclose(outputs[0], expected, atol=1e-4, rtol=1e-3)
    # `sweep plan` of a tuned job of another release: the child's tasks are those of the converted module.
    tuned_nchw, tuned_nhwc = (replace(j, tuning=8) for j in (nchw, nhwc))
    child = {t["hash"] for t in tasks_in_toolchain(toolchain, tuned_nhwc, data)["tasks"]}
    assert child == task_hashes(tuned_nhwc, model_zoo.tiny_cnn())
    # Both convolutions are other workloads in NHWC (the dense and softmax tasks are the same).
    assert len(child - task_hashes(tuned_nchw, model_zoo.tiny_cnn())) >= 2


def task_hashes(job, model: onnx.ModelProto) -> set[str]:  # type: ignore[no-untyped-def]
    """The workload hashes of the job's tuning tasks, extracted here from its converted module."""
    import tvm

    from workers.tuning.database import workload_hash
    from workers.tuning.stage import tuning_target
    from workers.tuning.tasks import extract, split_pipeline

    target = tuning_target(job.target.tvm_target, job.tuning_settings)
    front, _ = split_pipeline(job.pipeline, target)
    with tvm.transform.PassContext(opt_level=job.opt_level), target:
        fused = front(layouts.for_job(job, imported(model))[0])
    extracted, _ = extract(fused, target, job.tuning_settings.module_equality)
    return {workload_hash(e.dispatched[0], job.tuning_settings.module_equality) for e in extracted}


# --- a real sweep -----------------------------------------------------------------------------------

SWEEP = """
name = "layouts"
[[models]]
path = "{cnn}"
[[models]]
path = "{mlp}"
[axes]
executor = ["vm-bytecode", "onnxruntime"]
opt_level = [2]
layout = ["NCHW", "NHWC", "NCHW4c"]
[measure]
number = 3
repeat = 5
"""


@dataclass
class Swept:
    db: str
    rows: list[dict]
    by: dict[tuple[str, str | None], dict]  # (model, layout) -> results row of its vm-bytecode job


@pytest.fixture(scope="module")
def swept(models_dir: Path, tmp_path_factory: pytest.TempPathFactory, ray_local: None) -> Iterator[Swept]:
    """`sweep run` with no farm configured: the embedded farm (a tracker and a host board) it starts."""
    home = tmp_path_factory.mktemp("layouts-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TVMBENCH_HOME", str(home))
        patch.delenv("TVMBENCH_DB", raising=False)
        patch.delenv("TVMBENCH_TRACKER", raising=False)
        text = SWEEP.format(cnn=models_dir / "tiny_cnn.onnx", mlp=models_dir / "tiny_mlp.onnx")
        run = invoke("sweep", "run", str(write_sweep(home, text)))
        assert run.exit_code == 0, run.output
        db = f"sqlite:///{home / 'results.db'}"
        rows = json.loads(invoke("results", "list", "--json", "--db", db).stdout)
        by = {(r["model"], r["layout"]): r for r in rows if r["executor"] == "vm-bytecode"}
        yield Swept(db, rows, by)


def test_every_job_is_ok_against_onnx_runtime_and_the_baseline_ran_once(swept: Swept) -> None:
    assert sorted((r["model"], r["executor"], r["layout"]) for r in swept.rows) == [
        ("tiny_cnn", "onnxruntime", None),
        ("tiny_cnn", "vm-bytecode", "NCHW"),
        ("tiny_cnn", "vm-bytecode", "NCHW4c"),
        ("tiny_cnn", "vm-bytecode", "NHWC"),
        ("tiny_mlp", "onnxruntime", None),
        ("tiny_mlp", "vm-bytecode", "NCHW"),
        ("tiny_mlp", "vm-bytecode", "NCHW4c"),
        ("tiny_mlp", "vm-bytecode", "NHWC"),
    ]
    assert all(r["status"] == "ok" for r in swept.rows), [
        (r["job_key"][:8], r["status"], r["error"]) for r in swept.rows
    ]
    nhwc = swept.by["tiny_cnn", "NHWC"]
    assert nhwc["max_abs_err"] is not None and nhwc["max_abs_err"] < 1e-4  # checked, not skipped
    assert nhwc["fingerprint"] != swept.by["tiny_cnn", "NCHW"]["fingerprint"], "NHWC built another program"
    blocked = swept.by["tiny_cnn", "NCHW4c"]
    assert blocked["max_abs_err"] is not None and blocked["max_abs_err"] < 1e-4
    assert len({r["fingerprint"] for r in (blocked, nhwc, swept.by["tiny_cnn", "NCHW"])}) == 3


def _show(swept: Swept, row: dict) -> dict:
    return json.loads(invoke("results", "show", row["job_key"], "--json", "--db", swept.db).stdout)


def test_the_build_provenance_and_pass_trace_show_the_conversion(swept: Swept) -> None:
    nhwc = _show(swept, swept.by["tiny_cnn", "NHWC"])
    assert nhwc["layout"] == "NHWC" and nhwc["config"]["layout"] == "NHWC"
    assert nhwc["build"]["layout"]["convs_converted"] == 2 and nhwc["build"]["layout"]["converted"]
    assert nhwc["build"]["pass_trace"][0] == "ConvertLayout"
    nchw = _show(swept, swept.by["tiny_cnn", "NCHW"])
    assert "ConvertLayout" not in nchw["build"]["pass_trace"] and not nchw["build"]["layout"]["converted"]
    text = invoke("results", "show", swept.by["tiny_cnn", "NHWC"]["job_key"], "--db", swept.db).stdout
    assert "layout NHWC: ConvertLayout" in text and "2 of 2 conv2d converted" in text, text
    assert "ConvertLayout > " in text  # first in the shown pass trace
    # NCHW4c: the stem's 3 channels are no multiple of 4, so it reads a block of 3 and writes one of 4.
    blocked = _show(swept, swept.by["tiny_cnn", "NCHW4c"])["build"]["layout"]
    assert (blocked["convs_converted"], blocked["grouped_kept"]) == (2, 0), blocked
    assert blocked["other_blocks"] == {"NCHW3c -> NCHW4c": 1}, blocked
    text = invoke("results", "show", swept.by["tiny_cnn", "NCHW4c"]["job_key"], "--db", swept.db).stdout
    assert "layout NCHW4c: ConvertLayout (relax.nn.conv2d: NCHW4c, OIHW4i4o): 2 of 2 conv2d converted" in text, text
    assert "smaller blocks: 1 NCHW3c -> NCHW4c" in " ".join(text.split()), text


def test_a_model_without_conv_under_nhwc_is_the_nchw_program_measured_once(swept: Swept) -> None:
    nhwc, nchw = swept.by["tiny_mlp", "NHWC"], swept.by["tiny_mlp", "NCHW"]
    three = [nhwc, nchw, swept.by["tiny_mlp", "NCHW4c"]]
    assert len({r["fingerprint"] for r in three}) == 1
    (measured,) = [r for r in three if r["equivalent_to"] is None]
    assert all(r["equivalent_to"] == measured["job_key"] for r in three if r is not measured), "measured once for all"
    detail = _show(swept, nhwc)
    assert detail["build"]["layout"]["convs"] == 0 and detail["build"]["layout"]["convs_converted"] == 0
    text = invoke("results", "show", nhwc["job_key"], "--db", swept.db).stdout
    assert "0 of 0 conv2d converted" in text and "the conversion is a no-op" in text, text


def test_the_results_table_has_a_layout_column_when_rows_span_layouts(swept: Swept) -> None:
    listed = invoke("results", "list", "--db", swept.db, "--wide")
    header = next(line for line in listed.stdout.splitlines() if line.startswith("job "))
    assert " layout " in f"{header} ", listed.stdout
    assert "NHWC" in listed.stdout and "NCHW" in listed.stdout


def test_results_best_says_which_layout_won_with_medians_and_cis(swept: Swept) -> None:
    best = {r["model"]: r for r in json.loads(invoke("results", "best", "--json", "--db", swept.db).stdout)}
    cnn = best["tiny_cnn"]
    assert cnn["layout"] in LAYOUTS and cnn["layout"] in cnn["best"]  # the config name says its layout
    entries = cnn["layouts"]["entries"]
    assert sorted(e["layout"] for e in entries) == ["NCHW", "NCHW4c", "NHWC"]
    assert [e["median"] for e in entries] == sorted(e["median"] for e in entries) and entries[0]["ratio_to_best"] == 1.0
    for e in entries:
        assert e["median_lo"] <= e["median"] <= e["median_hi"], e
    winner = cnn["layouts"]["winner"]
    assert winner == entries[0]["layout"]
    assert cnn["layouts"]["verdict"].startswith((f"{winner} won", "uncertain"))
    mlp = best["tiny_mlp"]["layouts"]
    assert mlp["winner"] is None and mlp["verdict"].startswith("no winner"), mlp
    text = invoke("results", "best", "--db", swept.db, "--wide").stdout
    assert "tiny_cnn on host: fastest per layout" in text, text
    assert f"tiny_cnn on host: {cnn['layouts']['verdict'][:20]}" in " ".join(text.split()), text


# --- a tuned NHWC job -------------------------------------------------------------------------------

TUNED = """
name = "tuned-nhwc"
[[models]]
path = "{cnn}"
[axes]
executor = ["vm-bytecode"]
opt_level = [2]
layout = ["NHWC"]
tuning = [8]
[tuning]
cost_model = "random"
num_trials_per_iter = 4
[measure]
number = 3
repeat = 3
"""


@pytest.mark.slow
@pytest.mark.timeout(1800)  # minutes of MetaSchedule on a loaded 2-core machine
def test_a_tuned_nhwc_job_tunes_the_converted_convolutions(models_dir: Path, home: Path, ray_local: None) -> None:
    from sqlalchemy import select

    from db import models as m
    from db.store import ResultStore

    path = write_sweep(home, TUNED.format(cnn=models_dir / "tiny_cnn.onnx"))
    spec = parse_spec(path.read_text(), base=home)
    (job,) = plan_jobs(spec)
    nhwc_only = task_hashes(job, model_zoo.tiny_cnn()) - task_hashes(replace(job, layout="NCHW"), model_zoo.tiny_cnn())
    planned = json.loads(invoke("sweep", "plan", str(path), "--json").stdout)["jobs"][0]["tuning_plan"]
    run = invoke("sweep", "run", str(path))
    assert run.exit_code == 0, run.output
    (row,) = json.loads(invoke("results", "list", "--json").stdout)
    assert row["status"] == "ok" and row["layout"] == "NHWC", row["error"]  # the tuned program's outputs are right
    build = json.loads(invoke("results", "show", row["job_key"], "--json").stdout)["build"]
    trace = build["pass_trace"]
    assert trace.index("ConvertLayout") < trace.index("MetaScheduleApplyDatabase"), "converted, then tuned"
    assert build["layout"]["convs_converted"] == 2
    tuning = build["tuning"]
    assert tuning["trials_run"] > 0
    assert all(t["records_found"] for t in tuning["tasks"] if t["best_us"] is not None)
    # The plan's tasks are the build's (both extracted from the converted module) ...
    assert [t["name"] for t in planned["tasks"]] == [t["name"] for t in tuning["tasks"]]
    store = ResultStore(f"sqlite:///{home / 'results.db'}", never_write=True)
    try:
        with store._sessions() as s:
            stored = set(s.scalars(select(m.TuningWorkload.workload_hash)))
    finally:
        store.close()
    # ... and the workloads tuned include NHWC convolutions, which an NCHW module does not have.
    assert stored & nhwc_only, (stored, nhwc_only)
