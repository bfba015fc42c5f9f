"""Load and inspect ONNX models: resolve bundled names, read the input signature, make seeded inputs.

Models come from users, so ``load_model`` is also the intake gate: a file that is not ONNX, comes from
a future opset, names operators ONNX does not define, declares tensors too large to allocate, has inputs
or outputs that are no numeric tensors (strings, a classifier's ZipMap), or keeps weights in external
files (which could point anywhere: ``../../etc/passwd``, a symlink), or is wired so that no runtime can
load it (a cycle, a name nothing defines) is refused here with one line naming
the file and the fix. Nothing outside the model's own file is ever opened.
"""

from __future__ import annotations

import hashlib
import unicodedata
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from tvmbench.core.errors import describe_missing
from tvmbench.core.printable import shortened, unprintable

BUNDLED_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


class ModelError(ValueError):
    """The model cannot be used; the message names the file and what to do."""


# Inputs are allocated (seeded random data) on the driver and on the board, weights are uploaded: a
# declared size above this is refused at intake rather than discovered as an out-of-memory kill.
MAX_TENSOR_BYTES = 1 << 30
MAX_MODEL_BYTES = (1 << 31) - 1  # protobuf's limit on one message: no valid .onnx file is larger
# Operator domains whose schemas onnx knows; custom domains are left to the importer (a `model` row).
_ONNX_DOMAINS = ("", "ai.onnx")


def bundled_models() -> list[str]:
    """Names of the real architectures shipped with the onnx package (constant-filled weights)."""
    return sorted(p.stem for p in BUNDLED_DIR.glob("*.onnx"))


def bundled_path(name: str) -> Path:
    """Path of a bundled model; accepts 'squeezenet' or 'light_squeezenet'."""
    shipped = set(bundled_models())  # by name only: "../x" must not reach a file outside the folder
    for candidate in (name, f"light_{name}"):
        if candidate in shipped:
            return BUNDLED_DIR / f"{candidate}.onnx"
    raise ModelError(
        f"onnx = {name!r} is not a model bundled with the onnx package; choose one of: " + ", ".join(bundled_models())
    )


@dataclass(frozen=True)
class LoadedModel:
    proto: onnx.ModelProto
    data: bytes
    sha256: str
    # (name, dims, dtype): dims hold ints, or strings for symbolic dimensions; None when the rank is unknown
    inputs: tuple[tuple[str, tuple[int | str, ...] | None, str], ...]


def load_model(path: Path) -> LoadedModel:
    """Read an ONNX file and its graph inputs (weights listed among the inputs are skipped)."""
    if not path.is_file():  # never open a FIFO or a device: reading one blocks or never ends
        raise ModelError(
            f"model file {path} {describe_missing(path)}: give the path of a .onnx file (relative to the sweep file)"
        )
    size = path.stat().st_size
    if size > MAX_MODEL_BYTES:  # read nothing: a sparse 50 GB file would be read whole before protobuf refused it
        raise ModelError(
            f"{path} is {size / 2**30:.1f} GiB, over the 2 GiB a protobuf ONNX file can hold: give a .onnx file "
            "(larger models keep weights in external data, which tvmbench does not read)"
        )
    try:
        data = path.read_bytes()
    except OSError as exc:  # a regular file that refuses reads (EIO from a failing disk, /proc/self/mem)
        raise ModelError(
            f"model file {path} cannot be read ({exc.strerror or exc}): give the path of a readable .onnx file"
        ) from None
    try:
        proto = onnx.load_from_string(data)
    except Exception as exc:  # DecodeError and friends: protobuf gives no stable exception type
        raise ModelError(f"{path} is not an ONNX model ({type(exc).__name__}): give a .onnx file") from exc
    if not proto.graph.node:
        raise ModelError(f"{path} is not an ONNX model (no graph nodes): give a .onnx file")
    if not proto.graph.output:  # nothing to return: each build and reference would fail, as a `model` row
        raise ModelError(
            f"{path}: the graph declares no outputs; nothing to time or check: re-export it with its outputs "
            "(graph.output)"
        )
    check_intake(proto, path)
    initializers = {init.name for init in proto.graph.initializer}
    inputs = []
    for value in proto.graph.input:
        if value.name in initializers:
            continue  # an input that is also an initializer is a weight (old opsets list them)
        ttype = value.type.tensor_type
        # No shape field at all: the rank is unknown too (an empty one is a scalar's), so the sweep file gives it.
        dims = (
            tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in ttype.shape.dim)
            if ttype.HasField("shape")
            else None
        )
        dtype = onnx.helper.tensor_dtype_to_np_dtype(ttype.elem_type).name if ttype.elem_type else "float32"
        inputs.append((value.name, dims, dtype))
    return LoadedModel(proto=proto, data=data, sha256=hashlib.sha256(data).hexdigest(), inputs=tuple(inputs))


def _external_data_problem(tensor: onnx.TensorProto, path: Path) -> str:
    """Why a tensor's external data is refused; never opens the file it names."""
    location = next((e.value for e in tensor.external_data if e.key == "location"), "")
    try:
        return _external_location_problem(tensor, path, location)
    except (OSError, RuntimeError):  # a name too long to stat, a symlink loop (RuntimeError from resolve())
        return (
            f"{path}: tensor {tensor.name!r} keeps its data at {shortened(location)!r}, which cannot be resolved; "
            "refused, unread: re-save the model with its weights inside the .onnx file"
        )


def _external_location_problem(tensor: onnx.TensorProto, path: Path, location: str) -> str:
    folder = path.resolve().parent
    if location and not Path(location).is_absolute() and (folder / location).is_symlink():
        where = "" if (folder / location).resolve().is_relative_to(folder) else ", leading outside the model's folder"
        return (
            f"{path}: tensor {tensor.name!r} keeps its data in {location!r}, which is a symlink{where}; refused, "
            "unread: re-save the model with its weights inside the .onnx file"
        )
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
        _no_control_characters(graph, path)
        if graph is proto.graph:  # a subgraph may read its outer graphs' names: only the top is closed
            _check_wiring(graph, path)
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
    initializers = {init.name for init in proto.graph.initializer}
    for kind, values in (("input", proto.graph.input), ("output", proto.graph.output)):
        for value in values:
            if value.name not in initializers and (problem := _not_a_numeric_tensor(value)):
                raise ModelError(
                    f"{path}: {kind} {value.name!r} is {problem}; tvmbench builds and times models whose inputs "
                    "and outputs are numeric tensors (bool, integers, float16/32/64): re-export it without that "
                    + ("input" if kind == "input" else "output (skl2onnx: options={'zipmap': False})")
                )
    # Inputs are allocated on the driver and the board, outputs on the board and again for the reference.
    for kind, values in (("input", proto.graph.input), ("output", proto.graph.output)):
        total = 0
        for value in values:
            if value.name in initializers:
                continue
            ttype = value.type.tensor_type
            dims = [d.dim_value for d in ttype.shape.dim if d.HasField("dim_value")]
            size = _declared_bytes(dims, ttype.elem_type or onnx.TensorProto.FLOAT)
            total += size
            if size > MAX_TENSOR_BYTES:
                raise ModelError(
                    f"{path}: {kind} {value.name!r} declares {size / 2**30:.1f} GiB (dims {dims}), over the "
                    f"{MAX_TENSOR_BYTES >> 30} GiB limit; use a smaller {kind} shape"
                )
        if total > MAX_TENSOR_BYTES:
            raise ModelError(
                f"{path}: its {kind}s declare {total / 2**30:.1f} GiB together, over the {MAX_TENSOR_BYTES >> 30} GiB "
                f"limit; use smaller {kind} shapes"
            )


def _check_wiring(graph: onnx.GraphProto, path: Path) -> None:
    """Refuse a graph no runtime can load: a node input or graph output nothing defines, or a cycle.

    ONNX Runtime refused these only at the reference step, after the sweep was planned and recorded;
    order alone is not checked (ONNX Runtime sorts a graph whose nodes are listed out of order).
    """
    defined = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    produced: dict[str, int] = {}
    for index, node in enumerate(graph.node):
        for name in node.output:
            if name:
                produced.setdefault(name, index)

    def label(index: int) -> str:
        return repr(graph.node[index].name or f"{graph.node[index].op_type} #{index}")

    for index, node in enumerate(graph.node):
        missing = next((n for n in node.input if n and n not in defined and n not in produced), None)
        if missing is not None:
            raise ModelError(
                f"{path}: node {label(index)} reads {missing!r}, which no input, initializer or node defines; "
                "the model is invalid (onnx.checker.check_model names the problem): fix or re-export it"
            )
    for value in graph.output:
        if value.name not in defined and value.name not in produced:
            raise ModelError(
                f"{path}: output {value.name!r} is produced by no node, input or initializer; the model is invalid: "
                "fix or re-export it"
            )
    # Kahn's algorithm over node -> node edges: whatever is never freed lies on (or behind) a cycle.
    waiting = [sum(1 for n in set(node.input) if n in produced and n not in defined) for node in graph.node]
    readers: dict[str, list[int]] = {}
    for index, node in enumerate(graph.node):
        for name in set(node.input):
            if name in produced and name not in defined:
                readers.setdefault(name, []).append(index)
    ready = [i for i, count in enumerate(waiting) if count == 0]
    while ready:
        for name in graph.node[ready.pop()].output:
            for reader in readers.pop(name, []):
                waiting[reader] -= 1
                if waiting[reader] == 0:
                    ready.append(reader)
    stuck = [i for i, count in enumerate(waiting) if count > 0]
    if stuck:
        names = ", ".join(label(i) for i in stuck[:3]) + (f" and {len(stuck) - 3} more" if len(stuck) > 3 else "")
        raise ModelError(
            f"{path}: nodes {names} depend on each other in a cycle; the model is invalid: fix or re-export it"
        )


def _no_control_characters(graph: onnx.GraphProto, path: Path) -> None:
    """Refuse a graph whose names hold control characters: they are printed on terminals (in tables and
    in ONNX Runtime's and TVM's messages), where an escape sequence would recolour or retitle the screen."""
    names = [
        *(("input", v.name) for v in graph.input),
        *(("output", v.name) for v in graph.output),
        *(("initializer", t.name) for t in graph.initializer),
        *(("value", v.name) for v in graph.value_info),
        *(("node", n.name) for n in graph.node),
        *(("tensor", t) for n in graph.node for t in (*n.input, *n.output)),
    ]
    for what, name in names:
        bad = unprintable(name)
        if bad is not None:
            kind = "the control character" if unicodedata.category(bad) == "Cc" else "the bidi control"
            raise ModelError(
                f"{path}: {what} {name!r} contains {kind} U+{ord(bad):04X}; rename it (names are printed on terminals)"
            )


def _not_a_numeric_tensor(value: onnx.ValueInfoProto) -> str | None:
    """What a graph input or output is instead of a numeric tensor (None when it is one, or untyped)."""
    kind = value.type.WhichOneof("value")
    if kind is None:
        return None  # no type given: the importer infers it
    if kind != "tensor_type":
        return {"sequence_type": "a sequence", "map_type": "a map", "optional_type": "an optional"}.get(
            kind, f"a {kind.removesuffix('_type')}"
        ) + (" (such as a classifier's ZipMap output)" if kind == "sequence_type" else "")
    elem = value.type.tensor_type.elem_type
    if not elem:
        return None
    try:
        dtype = onnx.helper.tensor_dtype_to_np_dtype(elem)
    except Exception:  # an element type numpy has no dtype for
        return f"a tensor of {onnx.TensorProto.DataType.Name(elem).lower()}"
    if dtype == np.dtype(object):
        return "a tensor of strings"
    if np.issubdtype(dtype, np.complexfloating):
        return f"a tensor of {dtype.name}"
    if dtype.kind not in "biuf":  # bfloat16, float8, int4: ml_dtypes types ONNX Runtime's Python API cannot take
        return f"a tensor of {dtype.name}"
    return None


DEFAULT_INT_RANGE = (0, 9)  # integers drawn when nothing says otherwise (inclusive)
# Operators whose input at this position indexes an axis of their data input (input 0).
_INDEX_INPUTS = {"Gather": 1, "GatherElements": 1}


def index_bounds(proto: onnx.ModelProto, shapes: dict[str, tuple[int, ...]]) -> dict[str, int]:
    """Graph inputs used as Gather/GatherElements indices -> size of the axis they index (smallest if several).

    ``shapes`` holds the concrete input shapes; the indexed data is a weight (its dims), a graph input
    or an intermediate tensor whose shape ONNX shape inference finds. Unknown sizes are left out.
    """
    known: dict[str, list[int]] = {t.name: list(t.dims) for t in proto.graph.initializer}
    known.update({name: list(shape) for name, shape in shapes.items()})
    consumers = [
        (node, node.input[pos])
        for node in proto.graph.node
        if node.domain in _ONNX_DOMAINS
        and (pos := _INDEX_INPUTS.get(node.op_type)) is not None
        and len(node.input) > pos
        and node.input[pos] in shapes
    ]
    if not consumers:
        return {}
    if any(node.input[0] not in known for node, _ in consumers):
        try:  # the data is computed: ask shape inference for its shape
            inferred = onnx.shape_inference.infer_shapes(proto)
            for value in inferred.graph.value_info:
                dims = value.type.tensor_type.shape.dim
                if dims and all(d.HasField("dim_value") for d in dims):
                    known.setdefault(value.name, [d.dim_value for d in dims])
        except Exception:  # inference is best effort; the reference check still catches a bad index
            pass
    bounds: dict[str, int] = {}
    for node, index in consumers:
        data = known.get(node.input[0])
        if not data:
            continue
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        if -len(data) <= axis < len(data) and data[axis] > 0:
            bounds[index] = min(bounds.get(index, data[axis]), data[axis])
    return bounds


def seeded_inputs(
    inputs: tuple[tuple[str, tuple[int, ...], str], ...],
    seed: int,
    ranges: dict[str, tuple[float, float]] | None = None,
) -> dict[str, np.ndarray]:
    """Deterministic inputs for a signature: the same seed gives the same arrays on any machine.

    Integers are drawn from ``ranges[name]`` (inclusive) or DEFAULT_INT_RANGE; floats with a range are
    uniform in it, else standard normal; booleans are fair coin flips.
    """
    rng = np.random.default_rng(seed)
    ranges = ranges or {}
    arrays = {}
    for name, shape, dtype in inputs:
        if np.issubdtype(np.dtype(dtype), np.integer):
            lo, hi = ranges.get(name, DEFAULT_INT_RANGE)
            arrays[name] = rng.integers(int(lo), int(hi) + 1, size=shape).astype(dtype)
        elif dtype == "bool":
            arrays[name] = rng.integers(0, 2, size=shape).astype(bool)
        elif name in ranges:
            lo, hi = ranges[name]
            arrays[name] = rng.uniform(lo, hi, size=shape).astype(dtype)
        else:
            arrays[name] = rng.standard_normal(size=shape).astype(dtype)
    return arrays


_NPY_MAGIC = b"\x93NUMPY"  # the first bytes of a .npy file (numpy.lib.format)
_ZIP_MAGIC = b"PK"  # of a zip archive, which an .npz is (an empty archive starts PK too)


def _npz_array(path: Path, npz: Any, key: str) -> np.ndarray:
    """One member of an open .npz as an array; ModelError for a pickled object array or a non-array member."""
    try:
        value = npz[key]
    except ValueError as exc:
        if "allow_pickle" not in str(exc):
            raise
        raise ModelError(
            f"{path}: key {key!r} is an array of Python objects, which tvmbench never unpickles; save it as a "
            "numeric array"
        ) from None
    if not isinstance(value, np.ndarray):  # a zip member that is not a .npy comes back as its bytes
        raise ModelError(f"{path}: member {key!r} is not a numpy array; write the file with numpy.savez")
    return value


def load_inputs_file(path: Path, inputs: tuple[tuple[str, tuple[int, ...], str], ...]) -> dict[str, np.ndarray]:
    """The arrays of an .npz inputs file, checked against the signature; ModelError names the key at fault."""
    if not path.is_file():
        raise ModelError(f"inputs file {path} {describe_missing(path)}: give an .npz written by numpy.savez")
    # np.load takes any numpy file: a .npy gives one bare array (no names), anything else a ValueError
    # that advises allow_pickle=, which would run the file's code. Only a zip archive is opened.
    try:
        with path.open("rb") as file:
            head = file.read(len(_NPY_MAGIC))
    except OSError as exc:
        raise ModelError(f"inputs file {path} cannot be read ({exc.strerror or exc}); give a readable .npz") from None
    if head.startswith(_NPY_MAGIC):
        raise ModelError(
            f"{path} is a .npy file (one array without an input name); write an .npz with "
            "numpy.savez(path, name=array, ...)"
        )
    if not head.startswith(_ZIP_MAGIC):
        raise ModelError(
            f"{path} is not an .npz of arrays (not even a zip archive, which an .npz is); write it with "
            "numpy.savez(path, name=array, ...)"
        )
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {key: _npz_array(path, npz, key) for key in npz.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise ModelError(
            f"{path} is not an .npz of arrays ({exc}); write it with numpy.savez(path, name=array)"
        ) from None
    expected = {name: (tuple(shape), dtype) for name, shape, dtype in inputs}
    for key in arrays:
        if key not in expected:
            raise ModelError(f"{path}: key {key!r} is not an input of the model; its inputs: {sorted(expected)}")
    for name, (shape, dtype) in expected.items():
        if name not in arrays:
            raise ModelError(f"{path}: no array for input {name!r}; add {name}=<{dtype} array of shape {list(shape)}>")
        array = arrays[name]
        if array.dtype.name != dtype:
            raise ModelError(
                f"{path}: key {name!r} is {array.dtype.name}, the model's input is {dtype}; save it as {dtype}"
            )
        if tuple(array.shape) != shape:
            raise ModelError(f"{path}: key {name!r} has shape {list(array.shape)}, the model's input is {list(shape)}")
    return {name: arrays[name] for name in expected}
