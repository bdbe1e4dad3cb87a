"""The op table: every primitive a node can hold, with its kind and attribute names.

Composite functions (softmax, layer_norm, gelu, var, ...) are built from these primitives in
``lazyburn/frontend/functional.py`` so that fusion sees primitives only.

Kinds:
    source       leaves: ``buffer`` (realized data), ``const`` (a scalar filled over a shape),
                 ``iota`` (index along one axis), ``random_uniform`` / ``random_normal``
                 (float32 uniform in [0, 1) / standard normal, element i a function of the
                 attributes' seed and offset + i: ``codegen.philox``)
    elementwise  one output element from the same element of each input (inputs share the
                 output's shape; broadcasting and promotion are explicit ``expand``/``cast``)
    view         movement ops that only re-index their input: reshape, permute, expand, slice,
                 pad, window; they fold into load indices when fused. ``window`` (sliding
                 windows, PyTorch's ``Tensor.unfold`` on several axes) replaces each listed
                 axis of extent L by its count of window positions (L - dilation*(size-1)
                 - 1) // stride + 1 and appends one axis of extent ``size`` per listed axis:
                 out[..., o, ..., k] = x[..., o*stride + k*dilation, ...]. Convolution and
                 pooling read their input through it (im2col as index arithmetic)
    gather       data-dependent re-indexing: ``take`` (index_select) and ``take_along_axis``
    concat       joins inputs along an axis (a select on the index when fused)
    reduce       sum, prod, max, min, argmax, argmin, any, all over a set of axes
    scan         inclusive prefix sum and product along one axis (``cumsum``, ``cumprod``;
                 attrs ``(axis,)``): out[..., i, ...] = x[..., 0, ...] + ... + x[..., i, ...],
                 in the node's dtype (the front end casts the input to it first)
    sort         ``argsort`` along the last axis (attrs ``(descending,)``): int32 positions that
                 order each row stably -- ascending, or descending with equal elements kept in
                 their order -- nan after every number ascending and before them descending,
                 -0.0 equal to 0.0 (NumPy's ``argsort(kind="stable")`` and the array API's
                 ``descending``); the front end moves another axis last and gathers the
                 sorted values with ``take_along_axis``. ``merge`` (attrs ``(descending,
                 run)``) takes keys whose rows hold sorted runs of ``run`` and values in the
                 same order (the keys themselves, or their positions), and moves the values
                 as each pair of runs merges into one sorted run of ``2 * run``, ties from
                 the first run first: a long row is sorted as chunks, then merged
    matmul       batched matrix product (..., M, K) @ (..., K, N)
    library      a matrix decomposition the device's library computes (LAPACK through
                 ``numpy.linalg`` on the host, ``torch.linalg`` on CUDA), one library call per
                 node over contiguous inputs (float32, float64, complex64, complex128), batched
                 over the leading axes: ``cholesky`` (attrs ``(upper,)``), ``inv``, ``solve``
                 (A (..., n, n), B (..., n, k) of one batch shape), ``det``, ``eigvalsh``,
                 ``svdvals``, and the decompositions of several results, whose node holds them
                 packed along one last axis, each flattened, in the array API's order:
                 ``slogdet`` (sign, logabsdet: (..., 2)), ``eigh`` (eigenvalues (..., n),
                 eigenvectors (..., n, n)), ``qr`` (attrs ``(mode,)``: Q, R) and ``svd`` (attrs
                 ``(full_matrices,)``: U, S, Vh); the front end takes each result out with a
                 slice and a reshape (``frontend/linalg.py``). And the discrete Fourier
                 transforms: ``fft`` (attrs ``(function, s, axes, norm)``: ``function`` one of
                 NumPy's ``fftn ifftn rfftn irfftn hfft ihfft``, over ``axes`` with lengths
                 ``s``, ``norm`` "backward", "ortho" or "forward")
    copy         transfer to another device
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OpDef:
    name: str
    kind: str
    arity: int  # number of tensor inputs; -1 for variadic (concat)
    attrs: tuple[str, ...] = ()
    category: str = ""  # for elementwise ops: the dtype rule (see frontend/elementwise.py)


_TABLE: dict[str, OpDef] = {}


def _define(kind: str, arity: int, names: str, attrs: tuple[str, ...] = (), category: str = ""):
    for name in names.split():
        _TABLE[name] = OpDef(name, kind, arity, attrs, category)


# leaves
_define("source", 0, "buffer")
_define("source", 0, "const", ("value",))
_define("source", 0, "iota", ("axis",))
_define("source", 0, "random_uniform random_normal", ("seed", "offset"))

# element-wise: unary
_define("elementwise", 1, "neg abs sign square", category="arith")
_define("elementwise", 1, "exp exp2 expm1 log log2 log1p sqrt rsqrt sin cos tan tanh sigmoid erf",
        category="float")
_define("elementwise", 1, "log10", category="float")
# inverse trigonometric and hyperbolic functions (the array API's names)
_define("elementwise", 1, "asin acos atan sinh cosh asinh acosh atanh", category="float")
_define("elementwise", 1, "floor ceil round", category="round")
_define("elementwise", 1, "isnan isinf isfinite", category="predicate")
# the sign bit of a float (set for -0.0 and a negative nan); x < 0 on integers
_define("elementwise", 1, "signbit", category="signbit")
_define("elementwise", 1, "logical_not", category="logical")
_define("elementwise", 1, "bitwise_not", category="bitwise")
_define("elementwise", 1, "cast", ("dtype",), category="cast")
# the parts of a complex number and its conjugate (complex inputs only: the front end answers
# real inputs itself, so no fused backend meets them)
_define("elementwise", 1, "real imag conj", category="complex")
# a complex number from its parts (two float32 or float64 inputs of one dtype)
_define("elementwise", 2, "complex", category="complex")
# element-wise: binary
_define("elementwise", 2, "add sub mul floordiv mod minimum maximum", category="arith")
_define("elementwise", 2, "div pow", category="float")
# bit-level and exact: x1's magnitude with x2's sign bit; the float after x1 toward x2
_define("elementwise", 2, "copysign nextafter", category="float")
# the angle of the point (x2, x1), quadrant by both signs (C99 Annex F's special cases)
_define("elementwise", 2, "atan2", category="float")
_define("elementwise", 2, "eq ne lt le gt ge", category="compare")
_define("elementwise", 2, "logical_and logical_or logical_xor", category="logical")
_define("elementwise", 2, "bitwise_and bitwise_or bitwise_xor left_shift right_shift",
        category="bitwise")
# element-wise: ternary
_define("elementwise", 3, "where", category="where")

# views
_define("view", 1, "reshape")
_define("view", 1, "permute", ("perm",))
_define("view", 1, "expand")
_define("view", 1, "slice", ("starts", "steps"))
_define("view", 1, "pad", ("pads", "value"))
_define("view", 1, "window", ("axes", "sizes", "strides", "dilations"))

# data-dependent indexing: inputs (data, indices)
_define("gather", 2, "take", ("axis",))
_define("gather", 2, "take_along_axis", ("axis",))

_define("concat", -1, "concat", ("axis",))

_define("reduce", 1, "sum prod max min argmax argmin any all", ("axes",))

_define("scan", 1, "cumsum cumprod", ("axis",))

_define("sort", 1, "argsort", ("descending",))
_define("sort", 2, "merge", ("descending", "run"))

_define("matmul", 2, "matmul")

_define("library", 1, "cholesky", ("upper",))
_define("library", 1, "inv det slogdet eigh eigvalsh svdvals")
_define("library", 2, "solve")
_define("library", 1, "qr", ("mode",))
_define("library", 1, "svd", ("full_matrices",))
_define("library", 1, "fft", ("function", "s", "axes", "norm"))

_define("copy", 1, "copy")

OPS = _TABLE

ELEMENTWISE = frozenset(n for n, d in _TABLE.items() if d.kind == "elementwise")
VIEWS = frozenset(n for n, d in _TABLE.items() if d.kind == "view")
REDUCTIONS = frozenset(n for n, d in _TABLE.items() if d.kind == "reduce")
SCANS = frozenset(n for n, d in _TABLE.items() if d.kind == "scan")
SORTS = frozenset(n for n, d in _TABLE.items() if d.kind == "sort")
LIBRARY = frozenset(n for n, d in _TABLE.items() if d.kind == "library")
#: the first item of the last attribute of a library node that the complex lowering made on a
#: fused device (``fusion.complex_lowering``): ``(COMPLEX_PARTS, inputs, output)``, ``inputs``
#: a bool per input, true where it is a complex value given as its parts (a real buffer of
#: shape S + (2,)), ``output`` true where the complex result is stored so
COMPLEX_PARTS = "complex parts"
#: the reduction op each scan accumulates with
SCAN_OP = {"cumsum": "sum", "cumprod": "prod"}


def opdef(name: str) -> OpDef:
    return _TABLE[name]
