"""Load and inspect ONNX models: resolve bundled names, read the input signature, make seeded inputs.

Models come from users, so ``load_model`` is also the intake gate: a file that is not ONNX, comes from
a future opset, names operators ONNX does not define, declares tensors too large to allocate, or keeps
weights in external files (which could point anywhere: ``../../etc/passwd``, a symlink) is refused here
with one line naming the file and the fix. Nothing outside the model's own file is ever opened.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

BUNDLED_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


class ModelError(ValueError):
    """The model cannot be used; the message names the file and what to do."""


# Inputs are allocated (seeded random data) on the driver and on the board, weights are uploaded: a
# declared size above this is refused at intake rather than discovered as an out-of-memory kill.
MAX_TENSOR_BYTES = 1 << 30
# Operator domains whose schemas onnx knows; custom domains are left to the importer (a `model` row).
_ONNX_DOMAINS = ("", "ai.onnx")


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
    check_intake(proto, path)
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


def _external_data_problem(tensor: onnx.TensorProto, path: Path) -> str:
    """Why a tensor's external data is refused; never opens the file it names."""
    location = next((e.value for e in tensor.external_data if e.key == "location"), "")
    folder = path.resolve().parent
    target = (folder / location).resolve()  # resolve() follows symlinks: a link out of the folder shows here
    if not location or Path(location).is_absolute() or not target.is_relative_to(folder):
        return (
            f"{path}: tensor {tensor.name!r} keeps its data at {location!r}, outside the model's folder; "
            "refused (re-save the model with its weights inside the .onnx file)"
        )
    return (
        f"{path}: tensor {tensor.name!r} keeps its data in external file {location!r}, which tvmbench does not "
        "read; re-save with onnx.save(model, path, save_as_external_data=False)"
    )


def _declared_bytes(dims: list[int], elem_type: int) -> int:
    try:
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(elem_type).itemsize
    except Exception:  # unknown or string dtype: count it as one byte per element
        itemsize = 1
    return int(np.prod([max(int(d), 0) for d in dims], dtype=object)) * itemsize


def check_intake(proto: onnx.ModelProto, path: Path) -> None:
    """Refuse what must not reach a build or a board (see the module docstring); ModelError otherwise."""
    newest = onnx.defs.onnx_opset_version()
    for opset in proto.opset_import:
        if opset.domain in _ONNX_DOMAINS and opset.version > newest:
            raise ModelError(
                f"{path} needs ONNX opset {opset.version}, newer than the {newest} this onnx {onnx.__version__} "
                "knows; export the model with an older opset"
            )
    graphs = [proto.graph]
    while graphs:  # subgraphs (If/Loop bodies) carry nodes and initializers too
        graph = graphs.pop()
        for tensor in graph.initializer:
            if tensor.data_location == onnx.TensorProto.EXTERNAL or tensor.external_data:
                raise ModelError(_external_data_problem(tensor, path))
            size = _declared_bytes(list(tensor.dims), tensor.data_type)
            if size > MAX_TENSOR_BYTES:
                raise ModelError(
                    f"{path}: initializer {tensor.name!r} declares {size / 2**30:.1f} GiB (dims {list(tensor.dims)}), "
                    f"over the {MAX_TENSOR_BYTES >> 30} GiB limit; use a smaller model"
                )
        for node in graph.node:
            if node.domain in _ONNX_DOMAINS and not onnx.defs.has(node.op_type, node.domain):
                raise ModelError(
                    f"{path}: node {node.name or node.op_type!r} uses operator {node.op_type!r}, which ONNX does not "
                    "define; replace it or export with standard operators"
                )
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    graphs.append(attr.g)
                graphs.extend(attr.graphs)
    for value in proto.graph.input:
        ttype = value.type.tensor_type
        dims = [d.dim_value for d in ttype.shape.dim if d.HasField("dim_value")]
        size = _declared_bytes(dims, ttype.elem_type or onnx.TensorProto.FLOAT)
        if size > MAX_TENSOR_BYTES:
            raise ModelError(
                f"{path}: input {value.name!r} declares {size / 2**30:.1f} GiB (dims {dims}), over the "
                f"{MAX_TENSOR_BYTES >> 30} GiB limit; use a smaller input shape"
            )


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
