"""The graph rewrites a pipeline runs before the layout axis and TVM's per-target pipeline, by pipeline name.

"per-target" is TVM's own pipeline as it is; the pipelines named after it rewrite the imported Relax
module first, each rewrite one that ONNX Runtime's graph optimizer or its kernels have an equivalent of:
folding batch norms into convolutions (workers/fold_bn.py), reading a channel shuffle through the
convolution after it (workers/channel_shuffle.py), and a convolution of a channel concatenation summed
over its parts (workers/concat_split.py). They match NCHW conv2d calls as the importer writes them, so
they run before the layout axis converts those (``rewritten_module``): the Relax VM builder and the
tuning stage's task extraction both start from it, and a tuned build tunes the kernels of the program it
builds.
"""

from __future__ import annotations

from typing import Any

from tvmbench.core.records import Job

# Pipeline name -> the names of its rewrites, in order (``_passes`` says what each one runs).
REWRITTEN: dict[str, tuple[str, ...]] = {
    "per-target-fold-bn": ("fold-bn",),
    "per-target-fold-bn-shuffle": ("fold-bn", "shuffle"),
    "per-target-fold-bn-shuffle-concat": ("fold-bn", "shuffle", "concat"),
}


def _passes(rewrite: str) -> list[Any]:
    """The passes of one rewrite."""
    from tvm import relax

    if rewrite == "fold-bn":
        from workers.fold_bn import fold_batch_norm_passes

        return fold_batch_norm_passes()
    if rewrite == "shuffle":
        from workers.channel_shuffle import fuse_channel_shuffle_into_conv

        return [fuse_channel_shuffle_into_conv()]
    from workers.concat_split import split_conv_over_concat

    # The split slices constant weights: FoldConstant makes the importer's broadcast_to(constant) ones so.
    return [relax.transform.FoldConstant(), split_conv_over_concat()]


def rewrite_passes(pipeline: str) -> list[Any]:
    """The passes ``pipeline`` runs before the layout axis (none for a pipeline without rewrites)."""
    return [p for rewrite in REWRITTEN.get(pipeline, ()) for p in _passes(rewrite)]


def rewritten_module(job: Job, mod: Any) -> tuple[Any, dict[str, Any] | None]:
    """(``mod`` after the job pipeline's rewrites and then converted to its layout, the layout's provenance):
    the module the pipeline's own passes and tuning's task extraction start from. Call inside the job's
    PassContext (the build's pass trace then shows both)."""
    import tvm

    from workers.layouts import for_job as convert_layout

    passes = rewrite_passes(job.pipeline)
    if passes:
        mod = tvm.transform.Sequential(passes, name=f"tvmbench.rewrites.{job.pipeline}")(mod)
    return convert_layout(job, mod)
