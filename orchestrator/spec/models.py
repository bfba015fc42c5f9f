"""The [[models]] tables of a sweep file: the ONNX file, its input shapes, value ranges or inputs file."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any

import numpy as np

from orchestrator.spec.checks import SpecError, checked_name, typed, unknown_keys
from tvmbench.core.records import ModelRef
from workers.onnx_model import (
    DEFAULT_INT_RANGE,
    MAX_TENSOR_BYTES,
    LoadedModel,
    ModelError,
    bundled_path,
    index_bounds,
    load_inputs_file,
    load_model,
)

_MODEL_KEYS = {"name", "path", "onnx", "inputs", "input_ranges", "inputs_file"}


def parse_model(where: str, table: Any, base: Path) -> tuple[ModelRef, Path, Path | None]:
    if not isinstance(table, dict):
        raise SpecError(f'{where}: expected a table like {{ path = "net.onnx" }}')
    unknown_keys(where, table, _MODEL_KEYS)
    if ("path" in table) == ("onnx" in table):
        raise SpecError(f'{where}: give exactly one of path = "file.onnx" or onnx = "light_squeezenet"')
    try:
        if "path" in table:
            path = base / typed(f"{where}.path", table["path"], str, "a file path string")
            source = str(table["path"])
        else:
            path = bundled_path(typed(f"{where}.onnx", table["onnx"], str, "a bundled model name"))
            source = f"onnx:{path.stem}"
        loaded: LoadedModel = load_model(path)
    except ModelError as exc:
        raise SpecError(f"{where}: {exc}") from None
    given = typed(f"{where}.inputs", table.get("inputs", {}), dict, "a table of input name -> shape list")
    known = {name for name, _, _ in loaded.inputs}
    for name in given:
        if name not in known:
            raise SpecError(f"{where}.inputs: model {path.name} has no input {name!r}; its inputs: {sorted(known)}")
    inputs = []
    for name, dims, dtype in loaded.inputs:
        if name in given:
            shape = given[name]
            if not (
                isinstance(shape, list) and all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape)
            ):
                raise SpecError(f"{where}.inputs.{name} = {shape!r}: expected a list of positive ints")
            if dims is not None and (
                len(shape) != len(dims) or any(isinstance(d, int) and d != s for d, s in zip(dims, shape, strict=False))
            ):
                raise SpecError(f"{where}.inputs.{name} = {shape}: the model declares {list(dims)}")
        elif dims is None:  # no shape in the file: not even its rank is known (a scalar has an empty shape)
            raise SpecError(
                f"{where}: input {name!r} of {path.name} declares no shape (not even its rank); "
                f"add inputs = {{ {name} = [...] }} with concrete sizes"
            )
        elif all(isinstance(d, int) and d > 0 for d in dims):
            shape = list(dims)
        elif any(isinstance(d, int) and d == 0 for d in dims):
            raise SpecError(
                f"{where}: input {name!r} of {path.name} has a zero-size dimension {list(dims)}: nothing to "
                "compute or time; export the model with sizes of at least 1"
            )
        else:
            raise SpecError(
                f"{where}: input {name!r} of {path.name} has symbolic dims {list(dims)}; "
                f"add inputs = {{ {name} = [...] }} with concrete sizes"
            )
        size = int(np.prod(shape, dtype=object)) * np.dtype(dtype).itemsize
        if size > MAX_TENSOR_BYTES:
            raise SpecError(
                f"{where}.inputs.{name} = {shape}: {size / 2**30:.1f} GiB per input, over the "
                f"{MAX_TENSOR_BYTES >> 30} GiB limit; give a smaller shape"
            )
        inputs.append((name, tuple(shape), dtype))
    name = checked_name(f"{where}.name", typed(f"{where}.name", table.get("name", path.stem), str, "a string"))
    ranges = input_ranges(where, table.get("input_ranges", {}), tuple(inputs), loaded, path)
    inputs_file = None
    if "inputs_file" in table:
        if "input_ranges" in table:
            raise SpecError(f"{where}: give input_ranges or inputs_file, not both (the file holds every value)")
        given_file = typed(f"{where}.inputs_file", table["inputs_file"], str, 'a path like "inputs.npz"')
        inputs_file = base / given_file
        try:
            load_inputs_file(inputs_file, tuple(inputs))
        except ModelError as exc:
            raise SpecError(f"{where}.inputs_file: {exc}") from None
        ranges = ()
    model = ModelRef(
        name=name,
        sha256=loaded.sha256,
        source=source,
        inputs=tuple(inputs),
        value_ranges=ranges,
        inputs_file_sha256=hashlib.sha256(inputs_file.read_bytes()).hexdigest() if inputs_file else None,
    )
    return model, path, inputs_file


def input_ranges(
    where: str, given: Any, inputs: tuple[tuple[str, tuple[int, ...], str], ...], loaded: LoadedModel, path: Path
) -> tuple[tuple[str, float, float], ...]:
    """Value ranges of the inputs: the sweep file's, else the size of the table an integer input indexes."""
    given = typed(f"{where}.input_ranges", given, dict, "a table of input name -> [low, high]")
    dtypes = {name: dtype for name, _, dtype in inputs}
    ranges: dict[str, tuple[float, float]] = {}
    for name, bounds in given.items():
        if name not in dtypes:
            raise SpecError(
                f"{where}.input_ranges: model {path.name} has no input {name!r}; its inputs: {sorted(dtypes)}"
            )
        dtype = np.dtype(dtypes[name])
        integer = np.issubdtype(dtype, np.integer)
        number = int if integer else (int, float)
        if not (
            isinstance(bounds, list)
            and len(bounds) == 2
            and all(isinstance(b, number) and not isinstance(b, bool) for b in bounds)
            and bounds[0] <= bounds[1]
        ):
            kind = "integers" if integer else "numbers"
            raise SpecError(
                f"{where}.input_ranges.{name} = {bounds!r}: expected [low, high], two {kind} with low <= high"
            )
        if dtype == np.bool_:
            raise SpecError(f"{where}.input_ranges.{name}: input {name!r} is bool; it takes no range")
        if integer and not (np.iinfo(dtype).min <= bounds[0] and bounds[1] <= np.iinfo(dtype).max):
            raise SpecError(f"{where}.input_ranges.{name} = {bounds}: outside what {dtype.name} holds")
        # A float range is drawn uniformly: its ends and its width must be finite numbers of the input's type
        # (inf, or 1e10 for a float16 input, would make every value inf or the draw fail).
        largest = float(np.finfo(dtype).max) if np.issubdtype(dtype, np.floating) else None
        if not integer and not (
            largest is not None
            and -largest <= bounds[0]
            and bounds[1] <= largest
            and math.isfinite(bounds[1] - bounds[0])
        ):
            raise SpecError(
                f"{where}.input_ranges.{name} = {bounds}: outside the finite values {dtype.name} holds; "
                "give finite bounds"
            )
        ranges[name] = (bounds[0], bounds[1])
    # An integer input that indexes a table (Gather: embeddings, lookups) is drawn inside it unless the
    # file says otherwise; only a table smaller than the default draw changes anything.
    for name, size in index_bounds(loaded.proto, {n: s for n, s, _ in inputs}).items():
        if name not in ranges and np.issubdtype(np.dtype(dtypes[name]), np.integer) and size <= DEFAULT_INT_RANGE[1]:
            ranges[name] = (0, size - 1)
    return tuple((name, *ranges[name]) for name, _, _ in inputs if name in ranges)
