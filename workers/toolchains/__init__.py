"""TVM toolchains: one Python environment per TVM release, wheel or interpreter, and builds that run in them.

The package is split by which side of the process boundary a module runs on. ``child`` and ``compat`` run
under a toolchain's own interpreter (which has TVM, onnx and numpy, and nothing else of ours' dependencies),
so they and this file import only the standard library and the build code; the parent side (``pins``,
``spec``, ``registry``, ``provision``, ``probe``, ``build``) never imports TVM.
"""
