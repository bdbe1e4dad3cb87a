"""The matrix decompositions and the discrete Fourier transforms (``ir.ops`` kind ``library``)
as calls of a library: LAPACK through ``numpy.linalg`` and pocketfft through ``numpy.fft`` on
the host for the NumPy, OpenCL and WebGPU devices; ``torch.linalg`` (cuSOLVER and MAGMA on a
GPU) and ``torch.fft`` (cuFFT) on the CUDA device.

A library call computes one node from its inputs' whole buffers and returns the node's value,
with the results of a decomposition of several (``slogdet``, ``eigh``, ``qr``, ``svd``) packed
along one last axis, each flattened, in the array API's order. A matrix the library cannot
decompose (singular for ``inv`` and ``solve``, not positive definite for ``cholesky``, an
iteration that does not converge) raises LinAlgError naming the user line of the op.

Non-finite entries. A matrix holding a nan or an infinity among the entries its decomposition
reads (the lower triangle for ``eigh``, ``eigvalsh`` and ``cholesky``, the upper one for
``cholesky(upper=True)``; every entry of both operands for ``solve``) gives nan for every
result of that matrix, on every device: the libraries disagree there (cuSOLVER's inverse of a
matrix with one nan above the diagonal was measured to be the identity on an H200, where LAPACK
gives nans, and LAPACK's SVD of it does not converge). Such a matrix is replaced by the
identity for the call and its results by nan after it, so it neither reaches the library nor
raises.
"""
from __future__ import annotations

import numpy as np

from ..errors import LinAlgError
from ..ir import dtypes as dt
from ..ir.ops import COMPLEX_PARTS

#: what computes a library call on a device without a library of its own
HOST_ENGINE = {"linalg": "library: numpy.linalg (LAPACK) on the host",
               "fft": "library: numpy.fft (pocketfft) on the host"}
#: ... and on the CUDA device
TORCH_ENGINE = {"linalg": "library: torch.linalg on the device",
                "fft": "library: torch.fft (cuFFT) on the device"}


def engine(engines: dict, k) -> str:
    """What computes planned library call ``k`` (whose first op is the library node), from
    ``engines`` (``HOST_ENGINE`` or ``TORCH_ENGINE``)."""
    return engines["fft" if k.ops[0].op == "fft" else "linalg"]


def _numpy_calls():
    la = np.linalg
    return {
        "cholesky": lambda a, upper: la.cholesky(a, upper=upper),
        "inv": la.inv,
        "solve": la.solve,
        "det": la.det,
        "slogdet": la.slogdet,
        "eigh": la.eigh,
        "eigvalsh": la.eigvalsh,
        "svdvals": la.svdvals,
        "qr": lambda a, mode: la.qr(a, mode=mode),
        "svd": lambda a, full_matrices: la.svd(a, full_matrices=full_matrices),
    }


_NUMPY = _numpy_calls()


def _parts(n):
    """``(attrs, per input: given as parts, result as parts, result shape, result dtype)`` of
    library node ``n``: a node of the complex lowering (``ir.ops.COMPLEX_PARTS``) reads its
    complex inputs as their parts and writes a complex result so."""
    mark = n.attrs[-1] if n.attrs else None
    if not (isinstance(mark, tuple) and mark and mark[0] == COMPLEX_PARTS):
        return n.attrs, (False,) * len(n.inputs), False, n.shape, n.dtype
    _, parts_in, parts_out = mark
    if not parts_out:
        return n.attrs[:-1], parts_in, False, n.shape, n.dtype
    return n.attrs[:-1], parts_in, True, n.shape[:-1], dt.complex_dtype(n.dtype)


#: the decompositions that read one triangle of their matrix: the lower one (the upper one for
#: ``cholesky(upper=True)``)
TRIANGLE_ONLY = frozenset(("cholesky", "eigh", "eigvalsh"))


def _read(op: str, attrs: tuple, a, tril, triu):
    """The entries of matrix ``a`` that decomposition ``op`` reads (the others zero), with
    ``tril`` and ``triu`` of the array library at hand."""
    if op not in TRIANGLE_ONLY:
        return a
    return triu(a) if op == "cholesky" and attrs[0] else tril(a)
#: the Fourier transforms along one axis (the others take ``s`` and ``axes``)
ONE_AXIS = frozenset(("hfft", "ihfft"))


def host_call(n, arrays) -> np.ndarray:
    """Node ``n``'s value computed by ``numpy.linalg`` or ``numpy.fft`` from its inputs'
    ``arrays`` (each of its input's shape and dtype). Raises LinAlgError."""
    attrs, parts_in, parts_out, shape, dtype = _parts(n)
    arrays = [np.ascontiguousarray(a).view(dt.complex_dtype(dt.dtype(a.dtype)).np)[..., 0]
              if parts else a for a, parts in zip(arrays, parts_in)]
    if n.op == "fft":
        function, s, axes, norm = attrs
        fn = getattr(np.fft, function)
        out = fn(arrays[0], n=s[0], axis=axes[0], norm=norm) if function in ONE_AXIS else \
            fn(arrays[0], s=s, axes=axes, norm=norm)
    else:
        out = _host_decomposition(n, attrs, arrays, shape, dtype)
    out = np.ascontiguousarray(out, dtype=dtype.np).reshape(shape)
    return out.view(n.dtype.np).reshape(n.shape) if parts_out else out


def _host_decomposition(n, attrs, arrays, shape, dtype) -> np.ndarray:
    bad = np.zeros(arrays[0].shape[:-2], bool)  # per matrix: a non-finite entry it reads
    for a in arrays:
        bad |= ~np.isfinite(_read(n.op, attrs, a, np.tril, np.triu)).all((-2, -1))
    if bad.any():
        arrays = [np.where(bad[..., None, None], np.eye(*a.shape[-2:], dtype=a.dtype), a)
                  for a in arrays]
    try:
        with np.errstate(all="ignore"):  # a nan is the answer, as a kernel's would be
            results = _NUMPY[n.op](*arrays, *attrs)
    except np.linalg.LinAlgError as e:
        raise _failed(n, e) from None
    if isinstance(results, tuple):
        batch = shape[:-1]
        results = np.concatenate([np.reshape(r, batch + (-1,)).astype(dtype.np, copy=False)
                                  for r in results], axis=-1)
    out = np.array(results, dtype=dtype.np).reshape(shape)
    out[bad] = complex(np.nan, np.nan) if dtype.is_complex else np.nan
    return out


def torch_call(torch, n, tensors):
    """Node ``n``'s value computed by ``torch.linalg`` or ``torch.fft`` from its inputs'
    ``tensors`` (each of its input's shape and dtype, on the node's device), as a flat tensor.
    Raises LinAlgError. A decomposition waits for the device: the library reports a matrix it
    cannot decompose through a status the host reads."""
    attrs, parts_in, parts_out, shape, _ = _parts(n)
    tensors = [torch.view_as_complex(t.contiguous()) if parts else t
               for t, parts in zip(tensors, parts_in)]
    if n.op == "fft":
        function, s, axes, norm = attrs
        fn = getattr(torch.fft, function)
        results = fn(tensors[0], n=s[0], dim=axes[0], norm=norm) if function in ONE_AXIS \
            else fn(tensors[0], s=s, dim=axes, norm=norm)
    else:
        results = _torch_decomposition(torch, n, attrs, tensors, shape)
    results = results.resolve_conj()  # (ihfft returns a lazily conjugated view)
    if parts_out:
        results = torch.view_as_real(results.contiguous())
    return results.contiguous().reshape(-1)


def _torch_decomposition(torch, n, attrs, tensors, shape):
    la, op = torch.linalg, n.op
    bad = None  # per matrix: a non-finite entry it reads (computed on the device, no wait)
    for t in tensors:
        read = _read(op, attrs, t, torch.tril, torch.triu)
        finite = torch.isfinite(read).flatten(-2).all(-1)
        bad = ~finite if bad is None else bad | ~finite
    tensors = [torch.where(bad[..., None, None],
                           torch.eye(*t.shape[-2:], dtype=t.dtype, device=t.device), t)
               for t in tensors]
    try:
        if op == "cholesky":
            results = la.cholesky(tensors[0], upper=attrs[0])
        elif op == "qr":
            results = tuple(la.qr(tensors[0], mode=attrs[0]))
        elif op == "svd":
            results = tuple(la.svd(tensors[0], full_matrices=attrs[0]))
        elif op in ("slogdet", "eigh"):
            results = tuple(getattr(la, op)(tensors[0]))
        else:
            results = getattr(la, op)(*tensors)
    except la.LinAlgError as e:
        raise _failed(n, e) from None
    if isinstance(results, tuple):
        batch = shape[:-1]
        # packed in the complex dtype where one result is complex (eigh's eigenvalues are
        # real, its eigenvectors complex)
        dtype = next((r.dtype for r in results if r.is_complex()), results[0].dtype)
        results = torch.cat([r.reshape(batch + (-1,)).to(dtype) for r in results], dim=-1)
    nan = complex(float("nan"), float("nan")) if results.is_complex() else float("nan")
    return torch.where(bad.reshape(bad.shape + (1,) * (results.dim() - bad.dim())),
                       torch.full((), nan, dtype=results.dtype, device=results.device),
                       results)


def _failed(n, e: Exception) -> LinAlgError:
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return LinAlgError(f"linalg.{n.op} of shape {n.inputs[0].shape}: the library could not "
                       f"compute it: {text}", n.origin)
