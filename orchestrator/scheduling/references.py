"""The references of a sweep: each job's inputs and ONNX Runtime's outputs for them.

Computed once per (model, value ranges, inputs file, seed) in the driver, before the loop starts, and
put into the pool once. A reference that raises (an index out of range, an input ONNX Runtime refuses)
is the model's or the inputs' fault, not the sweep's: the job ends as a `model` row and the other
models go on (a resume does not retry it).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tvmbench.core.records import Job
from workers.onnx_model import load_inputs_file, seeded_inputs
from workers.reference import reference_outputs, reference_problem

Reference = tuple[dict[str, np.ndarray], list[np.ndarray]]


def reference_key(job: Job) -> tuple[Any, ...]:
    model = job.model
    return (model.sha256, model.value_ranges, model.inputs_file_sha256, job.measure.seed)


class References:
    """Inputs and reference outputs by reference key, and the problems of those that could not be made."""

    def __init__(self, model_data: dict[str, bytes], input_files: dict[str, Path]) -> None:
        self.model_data, self.input_files = model_data, input_files
        self._made: dict[tuple[Any, ...], Reference] = {}
        self._problems: dict[tuple[Any, ...], str] = {}
        self._refs: dict[tuple[Any, ...], tuple[Any, Any]] = {}

    def inputs(self, job: Job) -> dict[str, np.ndarray]:
        """The job's input arrays: its model's .npz inputs file, or drawn from the seed (and value ranges)."""
        model = job.model
        if model.inputs_file_sha256:
            return load_inputs_file(self.input_files[model.inputs_file_sha256], model.inputs)
        return seeded_inputs(model.inputs, job.measure.seed, {n: (lo, hi) for n, lo, hi in model.value_ranges})

    def problem(self, job: Job) -> str | None:
        """Make the job's reference (once per key); None when it is there, else the line saying why not."""
        key = reference_key(job)
        if key not in self._made and key not in self._problems:
            try:
                inputs = self.inputs(job)
                self._made[key] = (inputs, reference_outputs(self.model_data[job.model.sha256], inputs))
            except Exception as exc:  # ONNX Runtime's errors have no common base class
                try:
                    inputs = self.inputs(job)
                except Exception:  # the inputs themselves failed: the message names what it can
                    inputs = {}
                source = "given" if job.model.inputs_file_sha256 else "seeded"
                self._problems[key] = reference_problem(job.model.name, inputs, exc, source)
        return self._problems.get(key)

    def get(self, job: Job) -> Reference:
        """The job's (inputs, reference outputs); ``problem`` must have returned None for it."""
        self.problem(job)
        return self._made[reference_key(job)]

    def refs(self, job: Job, put: Callable[[Any], Any]) -> tuple[Any, Any]:
        """Pool references of the job's inputs and reference outputs, put once per reference."""
        key = reference_key(job)
        if key not in self._refs:
            inputs, reference = self.get(job)
            self._refs[key] = (put(inputs), put(reference))
        return self._refs[key]
