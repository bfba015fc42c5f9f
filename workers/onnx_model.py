"""Load and inspect ONNX models: resolve bundled names, read the input signature, make seeded inputs."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

BUNDLED_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


class ModelError(ValueError):
    """The model cannot be used; the message names the file and what to do."""


def bundled_models() -> list[str]:
    """Names of the real architectures shipped with the onnx package (constant-filled weights)."""
    return sorted(p.stem for p in BUNDLED_DIR.glob("*.onnx"))


def bundled_path(name: str) -> Path:
    """Path of a bundled model; accepts 'squeezenet' or 'light_squeezenet'."""
    for candidate in (name, f"light_{name}"):
        path = BUNDLED_DIR / f"{candidate}.onnx"
        if path.is_file():
            return path
    raise ModelError(
        f"onnx = {name!r} is not a model bundled with the onnx package; choose one of: " + ", ".join(bundled_models())
    )


@dataclass(frozen=True)
class LoadedModel:
    proto: onnx.ModelProto
    data: bytes
    sha256: str
    # (name, dims, dtype): dims hold ints, or strings for symbolic dimensions
    inputs: tuple[tuple[str, tuple[int | str, ...], str], ...]


def load_model(path: Path) -> LoadedModel:
    """Read an ONNX file and its graph inputs (weights listed among the inputs are skipped)."""
    if not path.is_file():
        raise ModelError(f"model file {path} does not exist: fix the path (relative to the sweep file)")
    data = path.read_bytes()
    try:
        proto = onnx.load_from_string(data)
    except Exception as exc:  # DecodeError and friends: protobuf gives no stable exception type
        raise ModelError(f"{path} is not an ONNX model ({type(exc).__name__}): give a .onnx file") from exc
    if not proto.graph.node:
        raise ModelError(f"{path} is not an ONNX model (no graph nodes): give a .onnx file")
    initializers = {init.name for init in proto.graph.initializer}
    inputs = []
    for value in proto.graph.input:
        if value.name in initializers:
            continue  # an input that is also an initializer is a weight (old opsets list them)
        ttype = value.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in ttype.shape.dim)
        dtype = onnx.helper.tensor_dtype_to_np_dtype(ttype.elem_type).name if ttype.elem_type else "float32"
        inputs.append((value.name, dims, dtype))
    return LoadedModel(proto=proto, data=data, sha256=hashlib.sha256(data).hexdigest(), inputs=tuple(inputs))


def seeded_inputs(inputs: tuple[tuple[str, tuple[int, ...], str], ...], seed: int) -> dict[str, np.ndarray]:
    """Deterministic inputs for a signature: the same seed gives the same arrays on any machine."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for name, shape, dtype in inputs:
        if np.issubdtype(np.dtype(dtype), np.integer):
            arrays[name] = rng.integers(0, 10, size=shape).astype(dtype)
        elif dtype == "bool":
            arrays[name] = rng.integers(0, 2, size=shape).astype(bool)
        else:
            arrays[name] = rng.standard_normal(size=shape).astype(dtype)
    return arrays
