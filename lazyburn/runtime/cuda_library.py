"""The library matmul candidate on the CUDA device: ``torch.mm`` (``torch.bmm`` for a batch of
products; cuBLAS, hipBLAS) with the matmul group's prologue and epilogue as Triton element-wise
kernels, as Inductor does.

Operands that are plain strided loads of one buffer go to the library as ``as_strided`` views
(no copy); other operands are computed by a prologue kernel first, which stores them in the
operand type, transposed where its reads run along the operand's rows (a weight gradient's
``g.mT``: the library reads a transposed operand at no cost, a transposing store would not
be). float16/bfloat16 operands are multiplied in their own type (the library
accumulates in float32 and rounds the product to the operand type); the epilogue kernel reads
that product and widens it itself, so the library candidate costs the library call and one
element-wise pass; where the epilogue would only store a float32 product, the library writes
the output itself (``out=``) and no epilogue runs.
"""
from __future__ import annotations

import contextlib
import dataclasses

from ..codegen import triton as tr
from ..fusion.library import split_matmul
from .fused import Execution

HALF = ("float16", "bfloat16")


class LibraryMatmul:
    """Callable like a TritonKernel: ``(backend, args)`` with the matmul spec's buffers."""

    suffix, comment = ".py", "#"

    def __init__(self, backend, spec, name, params, origin):
        self.spec = spec
        self.origin = origin
        self.allow_tf32 = bool(params.get("allow_tf32"))
        self.parts = split_matmul(spec, follow_source=True, local_strides=True)
        # the product's type as the library returns it: the operands' for 16-bit operands
        self.prod_dtype = spec.a.dtype if spec.a.dtype.name in HALF else spec.acc_dtype
        self.writes_output = writes_output(spec, self.parts)
        # one product (a batch of 1): the operands are matrices and torch.mm multiplies them
        self.single = spec.batch == 1
        self.out_shape = (spec.m, spec.n) if self.single else (spec.batch, spec.m, spec.n)
        # the torch dtypes of the operands and of the product's buffer (read at every call)
        self.operand_t = {"a": backend.dtypes[spec.a.dtype.name],
                          "b": backend.dtypes[spec.b.dtype.name]}
        self.prod_t = backend.dtypes[self.prod_dtype.name]
        self.kernels = {}
        for part_name, part in self.parts.kernels.items():
            if part_name == "epilogue" and self.writes_output:
                continue
            if part_name == "epilogue":
                part = _with_arg_dtype(part, len(self.parts.inputs["epilogue"]),
                                       self.prod_dtype)
            else:  # a prologue stores the operand in the type the library multiplies
                operand = spec.a if part_name == "a" else spec.b
                part = _with_arg_dtype(part, len(part.args) - 1, operand.dtype)
            self.kernels[part_name] = backend.build_kernel(
                part, f"{name}_{part_name}", tr.default_params(part, backend.interpret), origin)
        self.source = "\n".join(f"# {part_name}: library matmul part\n{k.source}"
                                for part_name, k in self.kernels.items()) or \
            f"# library matmul: torch.{'mm' if self.single else 'bmm'} writes the output; " \
            "no generated kernel\n"
        self.execution = library_execution(backend, spec, self.parts)
        # once every part kernel has compiled: the whole product as one call taking the
        # spec's buffers and scalar arguments, as a compiled Triton kernel's launcher does
        # (``cuda_replay.direct_launch`` calls it at every later launch)
        self.fast = None
        self.empty = False

    def __call__(self, backend, args) -> None:
        torch = backend.torch
        spec, parts = self.spec, self.parts
        a = self._operand(backend, args, "a", (spec.m, spec.k))
        b = self._operand(backend, args, "b", (spec.k, spec.n))
        n_in = len(spec.inputs)
        product = torch.mm if self.single else torch.bmm  # (cheaper calls than torch.matmul)
        if self.writes_output:
            with _tf32(torch, self.allow_tf32):
                product(a, b, out=args[n_in].view(self.out_shape))
        else:
            with _tf32(torch, self.allow_tf32):
                prod = product(a, b)
            prod = prod.reshape(-1)
            if prod.dtype != self.prod_t:  # (not in the usual case)
                prod = prod.to(self.prod_t)
            epi_args = [args[i] for i in parts.inputs["epilogue"]] + [prod] + list(args[n_in:])
            self.kernels["epilogue"](backend, epi_args)
        if self.fast is None:
            self.fast = self._launcher(backend)

    def _launcher(self, backend):
        """``launch(*args, stream=None)``: what ``__call__`` does, with every choice that does
        not depend on the arguments made here, once, and the part kernels launched through
        their compiled launchers; None while one of them has none (before its first launch;
        always under Triton's interpreter)."""
        torch = backend.torch
        spec, parts = self.spec, self.parts
        kernels = {}
        for part_name, k in self.kernels.items():
            if k.empty:
                return None  # (an empty product: left to __call__)
            if k.fast is None:
                return None
            kernels[part_name] = k.fast
        n_in = len(spec.inputs)
        n_buf = len(spec.args)
        product = torch.mm if self.single else torch.bmm
        allow_tf32 = self.allow_tf32
        prod_t = self.prod_t
        operand_of = [self._operand_launcher(backend, which, shape, kernels.get(which), n_buf)
                      for which, shape in (("a", (spec.m, spec.k)), ("b", (spec.k, spec.n)))]
        operand_a, operand_b = operand_of
        if self.writes_output:
            out_shape = self.out_shape

            def launch(*args, stream=None):
                a, b = operand_a(args, stream), operand_b(args, stream)
                with _tf32(torch, allow_tf32):
                    product(a, b, out=args[n_in].view(out_shape))
            return launch
        epilogue = kernels["epilogue"]
        epi_inputs = parts.inputs["epilogue"]

        def launch(*args, stream=None):
            a, b = operand_a(args, stream), operand_b(args, stream)
            with _tf32(torch, allow_tf32):
                prod = product(a, b)
            prod = prod.reshape(-1)
            if prod.dtype != prod_t:
                prod = prod.to(prod_t)
            epilogue(*[args[i] for i in epi_inputs], prod, *args[n_in:], stream=stream)
        return launch

    def _operand_launcher(self, backend, which, matrix, prologue, n_buf):
        """``operand(args, stream)``: ``_operand``'s result for the spec's buffers and scalar
        arguments ``args``, its prologue (if any) launched through its compiled launcher
        ``prologue``."""
        spec, parts = self.spec, self.parts
        single = self.single
        operand_t = self.operand_t[which]
        direct = parts.direct[which]
        if direct is not None:
            arg, strides, offset = direct
            shape = matrix if single else (spec.batch,) + matrix
            strides = strides[1:] if single else strides

            def operand(args, stream):
                view = args[arg].as_strided(shape, strides, offset)
                return view if view.dtype == operand_t else view.to(operand_t)
            return operand
        empty = backend.torch.empty
        device = backend.device
        size = parts.kernels[which].args[-1].size
        inputs = parts.inputs[which]
        if parts.transposed[which]:  # stored (batch, cols, rows): the library reads it so
            stored = (matrix[1], matrix[0]) if single else (spec.batch, matrix[1], matrix[0])
            dims = (1, 0) if single else (0, 2, 1)
        else:
            stored, dims = (matrix if single else (spec.batch,) + matrix), None

        def operand(args, stream):
            buf = empty(size, dtype=operand_t, device=device)
            prologue(*[args[i] for i in inputs], buf, *args[n_buf:], stream=stream)
            buf = buf.view(stored)
            return buf if dims is None else buf.permute(dims)
        return operand

    def _operand(self, backend, args, which, matrix):
        """Operand ``which`` as the library takes it: a ``matrix``-shaped view, or a batch of
        them when the spec has several products."""
        spec, parts = self.spec, self.parts
        single = self.single
        operand_t = self.operand_t[which]
        direct = parts.direct[which]
        if direct is not None:
            arg, strides, offset = direct
            view = args[arg].as_strided(matrix, strides[1:], offset) if single else \
                args[arg].as_strided((spec.batch,) + matrix, strides, offset)
            return view if view.dtype == operand_t else view.to(operand_t)
        out = parts.kernels[which].args[-1]
        operand = spec.a if which == "a" else spec.b
        buf = backend.empty(out.size, operand.dtype, self.origin)
        self.kernels[which](backend, [args[i] for i in parts.inputs[which]] + [buf] +
                            list(args[len(spec.args):]))  # the scalar arguments
        if parts.transposed[which]:  # stored (batch, cols, rows): the library reads it so
            return buf.reshape(matrix[1], matrix[0]).T if single else \
                buf.reshape(spec.batch, matrix[1], matrix[0]).transpose(1, 2)
        return buf.reshape(matrix if single else (spec.batch,) + matrix)


def writes_output(spec, parts) -> bool:
    """Whether the library writes ``spec``'s output itself: its epilogue only stores the
    product, in the type the library returns it (a float32 product; a 16-bit one is rounded
    by the library to the operands' type, and its epilogue widens it)."""
    return parts.product_is_output and spec.a.dtype == spec.b.dtype == spec.acc_dtype


def library_execution(backend, spec, parts=None) -> Execution:
    """A ``LibraryMatmul`` of ``spec`` on ``backend`` as explain and the dump state it: one
    ``torch.mm`` or ``torch.bmm`` (cuBLAS, hipBLAS; PyTorch's CPU product under Triton's
    interpreter) and its element-wise Triton kernels (the prologues that compute an operand;
    the epilogue unless the library writes the output itself, ``writes_output``)."""
    parts = parts or split_matmul(spec)
    if backend.interpret:
        library = "library: PyTorch's CPU matmul (Triton interpreter)"
    else:
        library = "library: hipBLAS through PyTorch" if backend.torch.version.hip else \
            "library: cuBLAS through PyTorch"
    roles = tuple(name for name in ("a", "b", "epilogue") if name in parts.kernels and
                  not (name == "epilogue" and writes_output(spec, parts)))
    return Execution(library, generated=len(roles), library_calls=1, parts=roles)


def _with_arg_dtype(spec, index: int, dtype):
    """``spec`` with argument ``index`` of element type ``dtype``. Kernels convert between a
    buffer's type and the value's type at the load or store, so the expressions stay as
    they are."""
    args = list(spec.args)
    args[index] = dataclasses.replace(args[index], dtype=dtype)
    return dataclasses.replace(spec, args=args)


_UNCHANGED = contextlib.nullcontext()


def _tf32(torch, allow: bool):
    """A context in which PyTorch's matmuls may use TF32 exactly when ``allow``: nothing to
    set in the usual case, where the flag already says so (a library call is made at every
    launch of its kernel)."""
    if torch.backends.cuda.matmul.allow_tf32 == allow:
        return _UNCHANGED
    return _set_tf32(torch, allow)


@contextlib.contextmanager
def _set_tf32(torch, allow: bool):
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = allow
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
