"""Ahead-of-time compilation of ONNX models to standalone C for microcontrollers (executor ``aot-c``).

TVM 0.27 has no AOT executor, microTVM or C runtime any more; this package rebuilds the path from what
is left: Relax lowers a model to a flat, statically planned ``main`` (``lower``), the tensors are packed
into one arena by lifetime (``memory``), TVM's C or LLVM codegen emits the kernels (``kernels``), a
generated driver calls them with the weights in flash (``codegen``), a small bare-metal harness turns it
into firmware for an emulated Cortex-M board (``firmware``) and a runner executes it (``runner``).
"""

from __future__ import annotations


class AotUnsupported(Exception):
    """The model cannot be compiled ahead of time for the board; the message names the operator or size."""
