"""The "per-target-fold-bn" pipeline's first passes: batch norms after convolutions folded into them.

ONNX Runtime folds a batch norm that follows a convolution into the convolution's weights and a bias;
TVM's per-target pipeline does not, and a legalized batch norm is a kernel of its own (README, "Batch
norms folded into convolutions"). Used by the Relax VM builder's pipeline and by tuning's front half.
"""

from __future__ import annotations

from typing import Any


def fold_batch_norm_passes() -> list[Any]:
    """What "per-target-fold-bn" runs first: a batch norm right after a conv2d (OIHW weights, constants)
    becomes scaled weights and a bias add, and FoldConstant computes the scaled weights at build time.

    FoldConstant runs first too: the ONNX importer gives some weights as ``broadcast_to(constant)``
    (light_shufflenet's, light_resnet50's), which the fold's pattern (a constant weight) does not match:
    without it 0 of their 49 and 53 batch norms folded, with it 48 and 53.
    """
    from tvm import relax

    t = relax.transform
    return [t.FoldConstant(), t.FoldBatchnormToConv2D(), t.FoldConstant()]
