"""The layout axis in another TVM release: a 0.26.0 toolchain's child converts as the worker does (NHWC and
the channel-blocked NCHW8c, whose conv2d_NCHWc lowering is ours).

The 0.26.0 toolchain is the one tests/test_toolchains.py caches in ~/.cache/tvmbench-test (provisioned on
the first run only).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from orchestrator.plan import plan_jobs
from orchestrator.spec import parse_spec
from workers.toolchains import provision
from workers.toolchains.build import build_in_toolchain, run_in_toolchain
from workers.toolchains.toolchain import Toolchain

RELEASE = "0.26.0"
SWEEP = f"""
[[models]]
path = 'tiny_cnn.onnx'
[axes]
executor = ['vm-bytecode']
layout = ['NCHW', 'NHWC', 'NCHW8c']
tvm = ['{RELEASE}']
"""


@pytest.fixture(scope="module")
def tvm026(cached_home: Path) -> Toolchain:
    """TVM 0.26.0, provisioned on the first run and found in the cache after."""
    return provision.add(RELEASE)


def test_nhwc_and_blocked_builds_of_another_release_are_converted_and_correct(
    tvm026: Toolchain, models_dir: Path
) -> None:
    nchw, nhwc, blocked = plan_jobs(parse_spec(SWEEP, base=models_dir))
    assert (nchw.layout, nhwc.layout, blocked.layout) == ("NCHW", "NHWC", "NCHW8c") and nhwc.toolchain == RELEASE
    data = (models_dir / "tiny_cnn.onnx").read_bytes()
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    (expected,) = ort.InferenceSession(data).run(None, {"x": x})
    fingerprints = []
    for job in (nchw, nhwc, blocked):
        build, artifact = build_in_toolchain(tvm026, job, data)
        assert build.status == "ok" and build.tvm_version == RELEASE, build.error
        assert build.build_key == job.build_key(RELEASE)
        converted = job.layout != "NCHW"
        assert build.layout is not None and build.layout["converted"] is converted
        assert build.layout["convs_converted"] == (2 if converted else 0)
        assert ("ConvertLayout" in build.pass_trace) is converted
        outputs, run = run_in_toolchain(tvm026, artifact, {"x": x})  # in 0.26.0's own runtime
        assert run["tvm_version"] == RELEASE
        np.testing.assert_allclose(outputs[0], expected, atol=1e-4, rtol=1e-3)
        fingerprints.append(build.fingerprint)
    assert len(set(fingerprints)) == 3, "NHWC and NCHW8c are other programs in 0.26.0 too"
    # 0.26.0's ConvertLayout takes the per-conv2d callback: the 3-channel stem writes NCHW8c.
    assert build.layout["other_blocks"] == {"NCHW3c -> NCHW8c": 1}, build.layout
