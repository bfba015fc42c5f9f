"""Reference outputs from ONNX Runtime on the host, and the comparison against them."""

from __future__ import annotations

import numpy as np


def reference_outputs(model_data: bytes, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Run the model under ONNX Runtime's CPU provider with the given inputs."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    # 4 = fatal only: warnings about unused initializers are noise, and an error is raised (and reported) anyway
    options.log_severity_level = 4
    try:
        session = ort.InferenceSession(model_data, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # ONNX Runtime's errors have no common base class
        raise SessionError(str(exc)) from exc
    return [np.asarray(o) for o in session.run(None, inputs)]


class SessionError(RuntimeError):
    """ONNX Runtime refused the model itself, before any input was given (its own error is the cause)."""


def _nonfinite(values: np.ndarray) -> str:
    nan, inf = int(np.isnan(values).sum()), int(np.isinf(values).sum())
    return f"{nan + inf} non-finite ({nan} NaN, {inf} inf)"


def compare(
    outputs: list[np.ndarray], reference: list[np.ndarray], atol: float, rtol: float
) -> tuple[float, float, str | None]:
    """(max abs error, max relative error, problem or None) of outputs against the reference.

    An output passes when |out - ref| <= atol + rtol * |ref| elementwise, as numpy.allclose says, and
    where it is not finite the reference has the same value at the same position (NaN with NaN, +inf
    with +inf, -inf with -inf): a model that computes log(-1) is right to say NaN. The errors are over
    the finite positions. Never raises: outputs that cannot be compared are a problem, not a crash.
    """
    if len(outputs) != len(reference):
        return float("inf"), float("inf"), f"{len(outputs)} outputs, ONNX Runtime gives {len(reference)}"
    max_abs = max_rel = 0.0
    problem = None
    for i, (out, ref) in enumerate(zip(outputs, reference, strict=True)):
        if out.shape != ref.shape:
            return float("inf"), float("inf"), f"output {i} has shape {out.shape}, expected {ref.shape}"
        try:
            o, r = np.asarray(out, dtype=np.float64), np.asarray(ref, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            return float("inf"), float("inf"), f"output {i} ({out.dtype}) cannot be compared as numbers: {exc}"
        o_bad, r_bad = ~np.isfinite(o), ~np.isfinite(r)
        same = o_bad & r_bad & ((np.isnan(o) & np.isnan(r)) | (o == r))
        if np.any((o_bad | r_bad) & ~same):
            where = np.argwhere((o_bad | r_bad) & ~same)
            first = tuple(int(x) for x in where[0])
            return (
                float("inf"),
                float("inf"),
                f"output {i}: non-finite values differ at {len(where)} position(s) (first {list(first)}: "
                f"{o[first]} vs ONNX Runtime {r[first]}); this run has {_nonfinite(o)}, ONNX Runtime "
                f"{_nonfinite(r)} of {o.size}",
            )
        finite = ~same
        diff = np.abs(o[finite] - r[finite])
        if diff.size:
            bound = atol + rtol * np.abs(r[finite])
            max_abs = max(max_abs, float(diff.max()))
            max_rel = max(max_rel, float((diff / np.maximum(np.abs(r[finite]), 1e-12)).max()))
            if problem is None and not np.all(diff <= bound):
                problem = f"output {i}: max abs error {diff.max():.3g} beyond atol={atol} rtol={rtol}"
    return max_abs, max_rel, problem


def reference_problem(model: str, inputs: dict[str, np.ndarray], exc: BaseException, source: str) -> str:
    """One line for a job whose reference could not be computed: the input(s) to look at and what to write.

    ``source`` says where the inputs came from ("seeded", or the .npz file). Integer inputs are named
    first: ONNX Runtime most often refuses an index out of range (Gather over a small table).
    """
    refused = isinstance(exc, SessionError)
    if refused and exc.__cause__ is not None:
        exc = exc.__cause__
    text = " ".join(str(exc).split())
    if len(text) > 300:
        text = text[:297] + "..."
    if "is not a registered function/op" in text or "NOT_IMPLEMENTED" in text:
        # An operator ONNX Runtime has no kernel for (a custom domain): no input would help.
        return (
            f"ONNX Runtime cannot run model {model}: {type(exc).__name__}: {text}; it has no kernel for an operator "
            "of the model, so there is no reference output: export the model with standard operators"
        )
    if refused:  # a cycle, a dangling output, duplicate names: no input would make it run
        return (
            f"ONNX Runtime cannot load model {model}: {type(exc).__name__}: {text}; the model itself is invalid, "
            "whatever its inputs (onnx.checker.check_model names the problem): fix or re-export it"
        )
    ints = [n for n, a in inputs.items() if np.issubdtype(a.dtype, np.integer)]
    named = ints or list(inputs)
    drawn = ", ".join(
        f"{n} {inputs[n].dtype}{list(inputs[n].shape)} in [{inputs[n].min()}, {inputs[n].max()}]"
        if inputs[n].size and inputs[n].dtype != np.bool_
        else f"{n} {inputs[n].dtype}{list(inputs[n].shape)}"
        for n in named
    )
    example = ", ".join(f"{n} = [LO, HI]" for n in named)
    return (
        f"ONNX Runtime cannot run model {model} on the {source} inputs ({drawn}): {type(exc).__name__}: {text}; "
        f"give the valid values on its [[models]] entry: input_ranges = {{ {example} }}, "
        'or inputs_file = "inputs.npz" with an array per input'
    )
