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
the output itself (``out=``) and no epilogue runs. After the first launch, which compiles the
part kernels, the product's views, the library call and the parts' compiled launchers are one
call (``LibraryMatmul.fast``), made once with every choice that does not depend on the
arguments.
"""
from __future__ import annotations

import contextlib
import dataclasses

from ..codegen import triton as tr
from ..fusion.library import split_matmul
from .fused import Execution

HALF = ("float16", "bfloat16")


class ComposedKernel:
    """Callable like a TritonKernel with a spec's buffers and scalar arguments, launching the
    kernels ``kernels`` (name -> kernel) and whatever else ``_launcher(backend, parts)`` does:
    the first launches through each kernel's call (which compiles it; every launch under
    Triton's interpreter, which compiles no launcher), then, once every kernel has compiled,
    through their compiled launchers: ``fast``, which every later call makes
    (``cuda_replay.direct_launch`` calls it directly; ``empty``: there is always a launch, as
    it asks of a kernel)."""

    fast = None
    empty = False
    kernels: dict

    def __call__(self, backend, args) -> None:
        if self.fast is not None:  # (the autotuner's timings too: launches, not their making)
            self.fast(*args, stream=backend.stream_handle)
            return

        def through_call(kernel):
            return lambda *a, stream=None: kernel(backend, list(a))
        self._launcher(backend, {name: through_call(k) for name, k in self.kernels.items()})(
            *args)
        if self.fast is None and all(not k.empty and k.fast is not None
                                     for k in self.kernels.values()):
            self.fast = self._launcher(backend, {name: k.fast
                                                 for name, k in self.kernels.items()})

    def _launcher(self, backend, parts: dict):
        """``launch(*args, stream=None)`` for the spec's buffers and scalar arguments;
        ``parts``: kernel name -> a launch ``(*args, stream=None)`` of that kernel."""
        raise NotImplementedError


class LibraryMatmul(ComposedKernel):
    """Callable like a TritonKernel: ``(backend, args)`` with the matmul spec's buffers."""

    suffix, comment = ".py", "#"

    def __init__(self, backend, spec, name, params, origin):
        self.spec = spec
        self.origin = origin
        self.allow_tf32 = bool(params.get("allow_tf32"))
        align = library_align(spec, params)
        self.parts = split_matmul(spec, follow_source=True, local_strides=True, align=align)
        self.k_size, self.n_size = self.parts.extents
        self.m_size = self.parts.rows
        self.prod_dtype = product_type(spec)
        self.writes_output = writes_output(spec, self.parts)
        # one product (a batch of 1): the operands are matrices and torch.mm multiplies them
        self.single = spec.batch == 1
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
        self.execution = library_execution(backend, spec, self.parts, align)

    def _launcher(self, backend, parts: dict):
        """``launch(*args, stream=None)`` computing the product for the spec's buffers and
        scalar arguments ``args``, every choice that does not depend on them made here, once;
        ``parts``: part name -> a launch ``(*args, stream=None)`` of that part's kernel."""
        torch = backend.torch
        spec = self.spec
        n_in = len(spec.inputs)
        n_buf = len(spec.args)
        product = torch.mm if self.single else torch.bmm  # (cheaper calls than torch.matmul)
        allow_tf32 = self.allow_tf32
        m, k, n = self.m_size, self.k_size, self.n_size
        operand_a = self._operand(backend, "a", (m, k), parts.get("a"), n_buf)
        operand_b = self._operand(backend, "b", (k, n), parts.get("b"), n_buf)
        if self.writes_output:
            # the output's rows, the product's N columns of each (with padded rows, maybe
            # their padding too: zeros, the product of B's zero columns)
            pitch = self.parts.out_pitch
            shape = (m, n) if self.single else (spec.batch, m, n)
            strides = (pitch, 1) if self.single else (m * pitch, pitch, 1)

            def launch(*args, stream=None):
                a, b = operand_a(args, stream), operand_b(args, stream)
                with _tf32(torch, allow_tf32):
                    product(a, b, out=args[n_in].as_strided(shape, strides))
            return launch
        epilogue = parts["epilogue"]
        epi_inputs = self.parts.inputs["epilogue"]
        prod_t = self.prod_t

        def launch(*args, stream=None):
            a, b = operand_a(args, stream), operand_b(args, stream)
            with _tf32(torch, allow_tf32):
                prod = product(a, b)
            prod = prod.reshape(-1)
            if prod.dtype != prod_t:  # (not in the usual case)
                prod = prod.to(prod_t)
            epilogue(*[args[i] for i in epi_inputs], prod, *args[n_in:], stream=stream)
        return launch

    def _operand(self, backend, which, matrix, prologue, n_buf):
        """``operand(args, stream)``: operand ``which`` as the library takes it, a
        ``matrix``-shaped view (a batch of them when the spec has several products) of a
        buffer of ``args``, or of the buffer its prologue kernel (launched by ``prologue``)
        computes."""
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
        empty, origin = backend.empty, self.origin  # (OutOfMemoryError names the origin)
        size = parts.kernels[which].args[-1].size
        dtype = (spec.a if which == "a" else spec.b).dtype
        inputs = parts.inputs[which]
        stored = parts.layout[which] if not single else parts.layout[which][1:]
        transposed = parts.transposed[which]
        # stored (batch, outer, inner): rows, or columns when transposed (the library reads it
        # so), each of them maybe padded past the matrix's side
        inner = matrix[0] if transposed else matrix[1]
        whole = inner == stored[-1]
        dims = None if not transposed else (1, 0) if single else (0, 2, 1)

        def operand(args, stream):
            buf = empty(size, dtype, origin)
            prologue(*[args[i] for i in inputs], buf, *args[n_buf:], stream=stream)
            buf = buf.view(stored) if whole else buf.view(stored)[..., :inner]
            return buf if dims is None else buf.permute(dims)
        return operand


def library_align(spec, params: dict) -> int:
    """The elements to which a library candidate with launch ``params`` pads ``spec``'s
    product (``split_matmul``'s ``align``): ``pad_to`` bytes of the operands' type, 0 without
    it."""
    return int(params.get("pad_to") or 0) // spec.a.dtype.itemsize


def writes_output(spec, parts) -> bool:
    """Whether the library writes ``spec``'s output itself: its epilogue only stores the
    product, in the type the library returns it (a float32 product of float32 operands; a
    16-bit product rounded to the operands' type, as the library rounds it: in a bfloat16
    training step on an H200, the epilogue kernel copying such products, the logits' (4096 x
    30 522) and one more, took 0.124 ms). Otherwise the epilogue reads the library's product
    and widens it itself."""
    return spec.a.dtype == spec.b.dtype and parts.stored_product == product_type(spec)


def product_type(spec):
    """The type of the product the library returns for ``spec``: the operands' for 16-bit
    operands, else the accumulator's."""
    return spec.a.dtype if spec.a.dtype.name in HALF else spec.acc_dtype


def library_execution(backend, spec, parts=None, align: int = 0) -> Execution:
    """A ``LibraryMatmul`` of ``spec`` on ``backend`` as explain and the dump state it: one
    ``torch.mm`` or ``torch.bmm`` (cuBLAS, hipBLAS; PyTorch's CPU product under Triton's
    interpreter) and its element-wise Triton kernels (the prologues that compute an operand
    or pad it, ``align``: ``split_matmul``'s; the epilogue unless the library writes the
    output itself, ``writes_output``)."""
    parts = parts or split_matmul(spec, follow_source=True, local_strides=True, align=align)
    if backend.interpret:
        library = "library: PyTorch's CPU matmul (Triton interpreter)"
    else:
        library = "library: hipBLAS through PyTorch" if backend.torch.version.hip else \
            "library: cuBLAS through PyTorch"
    if parts.padded:
        rows = f"M = {parts.rows}, " if parts.rows != spec.m else ""
        library += f" over {rows}K = {parts.extents[0]} and N = {parts.extents[1]}, its " \
            f"operands' rows padded to multiples of {align} elements"
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
