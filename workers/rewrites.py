"""The graph rewrites a pipeline runs before TVM's per-target pipeline, by pipeline name.

"per-target" is TVM's own pipeline as it is; the pipelines named after it run rewrites of the Relax module
first, each of which ONNX Runtime's graph optimizer (or its kernels) has an equivalent of: folding batch
norms into convolutions (workers/fold_bn.py), and reading a channel shuffle through the convolution after
it (workers/channel_shuffle.py). The Relax VM builder and the tuning stage's front half both take them
from here, so a tuned build tunes the kernels of the program it builds.
"""

from __future__ import annotations

from typing import Any

# Pipeline name -> the names of its rewrites, in order (each one a list of passes below).
REWRITTEN: dict[str, tuple[str, ...]] = {
    "per-target-fold-bn": ("fold-bn",),
    "per-target-fold-bn-shuffle": ("fold-bn", "shuffle"),
}


def rewrite_passes(pipeline: str) -> list[Any]:
    """The passes ``pipeline`` runs before per-target's (none for a pipeline without rewrites)."""
    from workers.channel_shuffle import fuse_channel_shuffle_into_conv
    from workers.fold_bn import fold_batch_norm_passes

    passes: list[Any] = []
    for rewrite in REWRITTEN.get(pipeline, ()):
        passes += fold_batch_norm_passes() if rewrite == "fold-bn" else [fuse_channel_shuffle_into_conv()]
    return passes
