"""The library matmul candidate on the CUDA device: ``torch.matmul`` (cuBLAS, hipBLAS) with the
matmul group's prologue and epilogue as Triton element-wise kernels, as Inductor does.

Operands that are plain strided loads of one buffer go to the library as ``as_strided`` views
(no copy); other operands are computed by a prologue kernel first. float16/bfloat16 operands
are multiplied in their own type (the library accumulates in float32) and the product is
widened to the accumulation type for the epilogue.
"""
from __future__ import annotations

import contextlib

from ..fusion.library import split_matmul
from ..codegen import triton as tr


class LibraryMatmul:
    """Callable like a TritonKernel: ``(backend, args)`` with the matmul spec's buffers."""

    suffix, comment = ".py", "#"

    def __init__(self, backend, spec, name, params, origin):
        self.spec = spec
        self.origin = origin
        self.allow_tf32 = bool(params.get("allow_tf32"))
        self.parts = split_matmul(spec)
        self.kernels = {}
        for part_name, part in self.parts.kernels.items():
            self.kernels[part_name] = backend.build_kernel(
                part, f"{name}_{part_name}", tr.default_params(part, backend.interpret), origin)
        self.source = "\n".join(f"# {part_name}: library matmul part\n{k.source}"
                                for part_name, k in self.kernels.items())

    def __call__(self, backend, args) -> None:
        torch = backend.torch
        spec, parts = self.spec, self.parts
        a = self._operand(backend, args, "a", (spec.m, spec.k))
        b = self._operand(backend, args, "b", (spec.k, spec.n))
        with _tf32(torch, self.allow_tf32):
            prod = torch.matmul(a, b)
        acc_t = backend.dtypes[spec.acc_dtype.name]
        prod = prod.reshape(-1).to(acc_t)
        n_in = len(spec.inputs)
        epi_args = [args[i] for i in parts.inputs["epilogue"]] + [prod] + list(args[n_in:])
        self.kernels["epilogue"](backend, epi_args)

    def _operand(self, backend, args, which, matrix):
        spec, parts = self.spec, self.parts
        shape = (spec.batch,) + matrix
        operand_t = backend.dtypes[(spec.a if which == "a" else spec.b).dtype.name]
        direct = parts.direct[which]
        if direct is not None:
            arg, strides, offset = direct
            view = args[arg].as_strided(shape, strides, offset)
            return view if view.dtype == operand_t else view.to(operand_t)
        part = parts.kernels[which]
        out = part.args[-1]
        buf = backend.empty(out.size, out.dtype, self.origin)
        self.kernels[which](backend, [args[i] for i in parts.inputs[which]] + [buf])
        return buf.reshape(shape).to(operand_t)


@contextlib.contextmanager
def _tf32(torch, allow: bool):
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = allow
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
