"""Reference outputs from ONNX Runtime on the host, and the comparison against them."""

from __future__ import annotations

import numpy as np


def reference_outputs(model_data: bytes, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Run the model under ONNX Runtime's CPU provider with the given inputs."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3  # warnings about unused initializers are noise here
    session = ort.InferenceSession(model_data, options, providers=["CPUExecutionProvider"])
    return [np.asarray(o) for o in session.run(None, inputs)]


def compare(
    outputs: list[np.ndarray], reference: list[np.ndarray], atol: float, rtol: float
) -> tuple[float, float, str | None]:
    """(max abs error, max relative error, problem or None) of outputs against the reference.

    An output passes when |out - ref| <= atol + rtol * |ref| elementwise, as numpy.allclose says.
    """
    if len(outputs) != len(reference):
        return float("inf"), float("inf"), f"{len(outputs)} outputs, ONNX Runtime gives {len(reference)}"
    max_abs = max_rel = 0.0
    problem = None
    for i, (out, ref) in enumerate(zip(outputs, reference, strict=True)):
        if out.shape != ref.shape:
            return float("inf"), float("inf"), f"output {i} has shape {out.shape}, expected {ref.shape}"
        diff = np.abs(out.astype(np.float64) - ref.astype(np.float64))
        if diff.size:
            if not np.all(np.isfinite(diff)):
                return float("inf"), float("inf"), f"output {i} has non-finite values where ONNX Runtime has none"
            max_abs = max(max_abs, float(diff.max()))
            max_rel = max(max_rel, float((diff / np.maximum(np.abs(ref), 1e-12)).max()))
            if problem is None and not np.all(diff <= atol + rtol * np.abs(ref)):
                problem = f"output {i}: max abs error {diff.max():.3g} beyond atol={atol} rtol={rtol}"
    return max_abs, max_rel, problem
