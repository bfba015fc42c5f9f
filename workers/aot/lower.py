"""ONNX -> Relax -> a flat, statically planned ``main``, read back as a list of kernel calls on tensors.

The pass order is the one that stops the CPU pipeline before the VM passes: what remains in ``main`` is
storage and tensor allocations, direct calls to TIR kernels (destination-passing: the output buffer is
the last argument), reshapes (views), folded constants and the returned tensor or tuple.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from workers.aot import AotUnsupported

# Relax ops that only describe memory; everything else in main must be a call to a TIR kernel.
_ALLOC_TENSOR = "relax.memory.alloc_tensor"
_ALLOC_STORAGE = "relax.memory.alloc_storage"
_ALLOC_OUTPUT = "relax.builtin.alloc_tensor"
_VIEWS = ("relax.reshape", "relax.memory.view")
_KILLS = ("relax.memory.kill_tensor", "relax.memory.kill_storage")


@dataclass
class Tensor:
    """One buffer the driver passes to kernels. Views share their base's bytes."""

    name: str  # a C identifier
    shape: tuple[int, ...]
    dtype: str
    kind: str  # "input", "output", "const", "arena" or "view"
    index: int = -1  # position among the model's inputs or outputs
    base: str | None = None  # for views: the tensor whose bytes they reuse
    data: np.ndarray | None = None  # for constants

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


@dataclass
class KernelCall:
    kernel: str
    args: list[str]  # tensor names; the last one (or more) are written


@dataclass
class Copy:
    src: str
    dst: str


@dataclass
class Program:
    """What the driver must do, in order, on which tensors."""

    tensors: dict[str, Tensor]
    steps: list[KernelCall | Copy]
    inputs: list[str]  # tensor names in the model's input order
    outputs: list[str]
    input_names: list[str]  # ONNX names
    output_names: list[str]
    kernels: Any  # tvm.IRModule of the PrimFuncs main calls, each with its global_symbol
    lowered: Any = None  # the whole lowered IRModule (for the fingerprint)
    notes: list[str] = field(default_factory=list)

    def root(self, name: str) -> Tensor:
        t = self.tensors[name]
        while t.base is not None:
            t = self.tensors[t.base]
        return t


def static_pipeline():
    """The Relax passes that give a flat main (the CPU pipeline up to, not including, the VM passes)."""
    from tvm import relax, transform

    return transform.Sequential(
        [
            relax.transform.LegalizeOps(),
            relax.transform.AnnotateTIROpPattern(),
            relax.transform.FoldConstant(),
            relax.transform.FuseOps(),
            relax.transform.FuseTIR(),
            relax.transform.DeadCodeElimination(),
            relax.transform.RewriteDataflowReshape(),
            relax.transform.ToNonDataflow(),
            relax.transform.RemovePurityChecking(),
            relax.transform.CallTIRRewrite(),
            relax.transform.StaticPlanBlockMemory(),
        ],
        name="tvmbench_aot_static",
    )


def symbolic_bindings(model: Any, shape_dict: dict[str, list[int]]) -> dict[str, int]:
    """dim_param name -> size, from the concrete input shapes the sweep gives."""
    bound: dict[str, int] = {}
    for value in model.graph.input:
        if value.name not in shape_dict:
            continue
        for dim, size in zip(value.type.tensor_type.shape.dim, shape_dict[value.name], strict=False):
            if dim.dim_param:
                bound[dim.dim_param] = int(size)
    return bound


def import_onnx(model_data: bytes, shape_dict: dict[str, list[int]]) -> tuple[Any, Any]:
    """(onnx model, Relax IRModule) with the symbolic dimensions bound to the sweep's sizes."""
    import onnx
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    model = onnx.load_from_string(model_data)
    mod = from_onnx(model, shape_dict=shape_dict, keep_params_in_input=False)
    bound = symbolic_bindings(model, shape_dict)
    # from_onnx already applies the input shapes; bind what is left (BindSymbolicVars rejects unknown names).
    present = {
        str(v.name)
        for f in mod.functions.values()
        if isinstance(f, relax.Function)
        for v in relax.analysis.defined_symbolic_vars(f)
    }
    bound = {k: v for k, v in bound.items() if k in present}
    if bound:
        mod = relax.transform.BindSymbolicVars(bound)(mod)
    return model, mod


def lower_static(mod: Any) -> Any:
    """Run the static pipeline under the C target (the caller enters the PassContext)."""
    from tvm.target import Target

    with Target({"kind": "c"}):
        return static_pipeline()(mod)


_IDENT = re.compile(r"[^A-Za-z0-9_]")


def c_name(prefix: str, name: str) -> str:
    return f"{prefix}{_IDENT.sub('_', name)}"


def _static_shape(ty: Any, where: str) -> tuple[tuple[int, ...], str]:
    from tvm import relax

    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        raise AotUnsupported(f"{where} is not a tensor of known shape; AOT needs static tensors")
    dims = []
    for d in ty.shape.values if hasattr(ty.shape, "values") else ty.shape:
        if not hasattr(d, "value"):
            raise AotUnsupported(
                f"{where} has the data-dependent dimension {d}; AOT needs every shape known at build time"
            )
        dims.append(int(d.value))
    return tuple(dims), str(ty.dtype)


def read_program(lowered: Any, output_names: list[str], input_names: list[str]) -> Program:
    """Walk the lowered ``main`` into a Program; AotUnsupported names whatever has no C equivalent."""
    import tvm
    from tvm import relax

    main = lowered["main"]
    tensors: dict[str, Tensor] = {}
    steps: list[KernelCall | Copy] = []
    var_tensor: dict[Any, str] = {}  # relax var -> tensor name
    var_tuple: dict[Any, list[Any]] = {}  # relax var bound to a tuple -> its fields
    const_ids: dict[Any, str] = {}  # keyed by the node itself: wrappers are fresh on each access
    kernels: dict[str, Any] = {}
    counter = {"t": 0}

    def fresh(kind: str) -> str:
        counter["t"] += 1
        return f"{kind}{counter['t']}"

    inputs = []
    for i, param in enumerate(main.params):
        shape, dtype = _static_shape(param.ty, f"input {param.name}")
        name = c_name("in_", input_names[i] if i < len(input_names) else param.name)
        tensors[name] = Tensor(name, shape, dtype, "input", index=i)
        var_tensor[param] = name
        inputs.append(name)

    def operand(expr: Any, where: str) -> str:
        if isinstance(expr, relax.Var):
            if expr in var_tensor:
                return var_tensor[expr]
            raise AotUnsupported(f"{where}: {expr.name} is not a tensor the AOT driver knows")
        if type(expr).__name__ in ("GenericConst", "Constant"):
            key = expr
            if key not in const_ids:
                data = expr.value.numpy()
                name = fresh("w")
                tensors[name] = Tensor(name, tuple(data.shape), str(data.dtype), "const", data=data)
                const_ids[key] = name
            return const_ids[key]
        raise AotUnsupported(f"{where}: argument {type(expr).__name__} {str(expr)[:60]} has no C equivalent")

    def shape_of(expr: Any) -> tuple[int, ...]:
        return tuple(int(v.value) for v in expr.values)

    body = main.body
    for block in body.blocks:
        for binding in block.bindings:
            var, value = binding.var, binding.value
            where = f"binding {var.name}"
            if isinstance(value, relax.Var):
                if value in var_tuple:
                    var_tuple[var] = var_tuple[value]
                else:
                    var_tensor[var] = operand(value, where)
                continue
            if isinstance(value, relax.Tuple):
                var_tuple[var] = list(value.fields)
                continue
            if isinstance(value, relax.TupleGetItem):
                fields = var_tuple.get(value.tuple_value)
                if fields is None:
                    raise AotUnsupported(f"{where}: tuple access on something that is not a tuple of tensors")
                var_tensor[var] = operand(fields[value.index], where)
                continue
            if type(value).__name__ in ("GenericConst", "Constant"):
                var_tensor[var] = operand(value, where)
                continue
            if not isinstance(value, relax.Call):
                raise AotUnsupported(f"{where}: {type(value).__name__} has no C equivalent in the AOT driver")
            op = value.op
            if isinstance(op, tvm.ir.GlobalVar):
                func = lowered[op]
                if not isinstance(func, tvm.tirx.PrimFunc):
                    raise AotUnsupported(f"{where}: call to Relax function {op.name_hint}; only TIR kernels can run")
                args = [operand(a, f"kernel {op.name_hint}") for a in value.args]
                kernels[op.name_hint] = func.with_attr("global_symbol", op.name_hint)
                steps.append(KernelCall(op.name_hint, args))
                continue
            # Ops have a name; VM builtins (ExternFunc, e.g. relax.run.nonzero) a global symbol.
            op_name = str(getattr(op, "name", None) or getattr(op, "global_symbol", None) or op)
            if op_name == _ALLOC_STORAGE or op_name in _KILLS:
                continue  # the AOT arena is planned anew, by tensor lifetime
            if op_name in (_ALLOC_TENSOR, _ALLOC_OUTPUT):
                shape, dtype = _static_shape(var.ty, where)
                name = fresh("t")
                tensors[name] = Tensor(name, shape, dtype, "arena")
                var_tensor[var] = name
                continue
            if op_name in _VIEWS:
                base = operand(value.args[0], where)
                shape, dtype = _static_shape(var.ty, where)
                name = fresh("v")
                view = Tensor(name, shape, dtype, "view", base=base)
                if view.nbytes != tensors[base].nbytes:
                    raise AotUnsupported(
                        f"{where}: {op_name} changes the byte size; only same-size views are supported"
                    )
                tensors[name] = view
                var_tensor[var] = name
                continue
            raise AotUnsupported(
                f"operator {op_name} (in {where}) has no C equivalent: the AOT backend runs TIR kernels only"
            )

    result = body.body
    if isinstance(result, relax.Var) and result in var_tuple:
        returned = var_tuple[result]
    elif isinstance(result, relax.Tuple):
        returned = list(result.fields)
    else:
        returned = [result]
    outputs = []
    renamed: dict[str, str] = {}
    for i, expr in enumerate(returned):
        src = operand(expr, f"output {i}")
        src = renamed.get(src, src)
        shape, dtype = tensors[src].shape, tensors[src].dtype
        name = c_name("out_", output_names[i] if i < len(output_names) else f"{i}")
        tensors[name] = Tensor(name, shape, dtype, "output", index=i)
        outputs.append(name)
        root = _root(tensors, src)
        # Write straight into the caller's buffer when the value is a planned tensor used once as output.
        if root.kind == "arena" and src == root.name:
            _rename(tensors, steps, src, name)
            renamed[src] = name
        else:
            steps.append(Copy(src, name))
    return Program(
        tensors=tensors,
        steps=steps,
        inputs=inputs,
        outputs=outputs,
        input_names=input_names,
        output_names=output_names,
        kernels=tvm.IRModule(kernels),
        lowered=lowered,
    )


def _root(tensors: dict[str, Tensor], name: str) -> Tensor:
    t = tensors[name]
    while t.base is not None:
        t = tensors[t.base]
    return t


def _rename(tensors: dict[str, Tensor], steps: list[KernelCall | Copy], old: str, new: str) -> None:
    """Let the output tensor ``new`` take the place of the planned tensor ``old`` everywhere."""
    del tensors[old]
    for t in tensors.values():
        if t.base == old:
            t.base = new
    for step in steps:
        if isinstance(step, KernelCall):
            step.args = [new if a == old else a for a in step.args]
        else:
            step.src = new if step.src == old else step.src
            step.dst = new if step.dst == old else step.dst
