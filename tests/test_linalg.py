"""The array API's ``linalg`` extension (``lazyburn.linalg``) against ``numpy.linalg`` on fresh
random data, on the reference device and every fused device: norms (every ``ord``, axis
tuples, ``keepdims``), diagonals and traces at every offset, cross products with broadcasting,
matrix powers by repeated squaring, outer products, the contractions the namespace shares with
the top level, the errors each raises and the plans that show them fusing (the decompositions:
tests/test_linalg_decompositions.py)."""
from __future__ import annotations

import math

import numpy as np
import pytest

import lazyburn as lb


def normal(rng, shape, dtype="float32"):
    return (rng.standard_normal(shape) * 3).astype(dtype)


def ints(rng, shape, dtype="int32"):
    return rng.integers(-9, 10, shape).astype(dtype)


def close(got, want, rtol=2e-5, atol=1e-5):
    out = got.numpy()
    assert out.shape == want.shape, (out.shape, want.shape)
    assert out.dtype == want.dtype, (out.dtype, want.dtype)
    np.testing.assert_allclose(out, want, rtol=rtol, atol=atol)


def test_namespace_is_the_array_api_extension():
    names = {"cholesky", "cross", "det", "diagonal", "eigh", "eigvalsh", "inv", "matmul",
             "matrix_norm", "matrix_power", "matrix_rank", "matrix_transpose", "outer", "pinv",
             "qr", "slogdet", "solve", "svd", "svdvals", "tensordot", "trace", "vecdot",
             "vector_norm", "LinAlgError"}
    assert set(lb.linalg.__all__) == names
    assert lb.linalg.LinAlgError is lb.LinAlgError and issubclass(lb.LinAlgError, ValueError)
    x = lb.asarray(np.ones((2, 3), np.float32))
    assert hasattr(x.__array_namespace__(), "linalg")
    assert lb.linalg.matmul is lb.matmul and lb.linalg.vecdot is lb.vecdot
    assert lb.linalg.tensordot is lb.tensordot and lb.linalg.matrix_transpose is lb.matrix_transpose


def test_contractions_through_the_namespace(device, rng):
    a, b = normal(rng, (2, 3, 4)), normal(rng, (4, 5))
    close(lb.linalg.matmul(lb.asarray(a, device=device), lb.asarray(b, device=device)), a @ b,
          atol=1e-4)
    close(lb.linalg.matrix_transpose(lb.asarray(a, device=device)), np.linalg.matrix_transpose(a))
    close(lb.linalg.tensordot(lb.asarray(a, device=device), lb.asarray(b, device=device),
                              axes=1), np.linalg.tensordot(a, b, axes=1), atol=1e-4)
    c = normal(rng, (3, 4))
    close(lb.linalg.vecdot(lb.asarray(a, device=device), lb.asarray(c, device=device), axis=-1),
          np.linalg.vecdot(a, c, axis=-1), atol=1e-4)


@pytest.mark.parametrize("ord", [2, 1, math.inf, -math.inf, 0, 3, -1, 0.5])
def test_vector_norm(device, rng, ord):
    host = normal(rng, (3, 4, 5))
    host[0, 1, 2] = 0.0  # ord=0 counts, negative ords see a zero
    x = lb.asarray(host, device=device)
    for axis in (None, -1, (0, 2), (2, 0, 1)):
        for keepdims in (False, True):
            with np.errstate(divide="ignore"):  # a negative ord of a zero
                want = np.linalg.vector_norm(host, axis=axis, keepdims=keepdims, ord=ord)
            close(lb.linalg.vector_norm(x, axis=axis, keepdims=keepdims, ord=ord),
                  np.asarray(want, np.float32), rtol=1e-5 if ord != 0.5 else 5e-5)


def test_vector_norm_dtypes_and_errors(device, rng):
    host = ints(rng, (4, 6))
    close(lb.linalg.vector_norm(lb.asarray(host, device=device), axis=1),
          np.linalg.vector_norm(host, axis=1).astype(np.float32))
    if device != "webgpu:0":
        h64 = normal(rng, (7,), "float64")
        close(lb.linalg.vector_norm(lb.asarray(h64, device=device), ord=3),
              np.asarray(np.linalg.vector_norm(h64, ord=3)), rtol=1e-12)
    x = lb.asarray(host, device=device)
    with pytest.raises(lb.ShapeError):
        lb.linalg.vector_norm(x, axis=2)
    with pytest.raises(lb.ShapeError):
        lb.linalg.vector_norm(x, axis=(1, -1))
    with pytest.raises(ValueError):
        lb.linalg.vector_norm(x, ord="fro")


@pytest.mark.parametrize("ord", ["fro", 1, -1, math.inf, -math.inf, 2, -2, "nuc"])
def test_matrix_norm(device, rng, ord):
    host = normal(rng, (2, 3, 4, 5))
    x = lb.asarray(host, device=device)
    for keepdims in (False, True):
        want = np.linalg.matrix_norm(host, keepdims=keepdims, ord=ord)
        close(lb.linalg.matrix_norm(x, keepdims=keepdims, ord=ord), want)


def test_matrix_norm_errors(device, rng):
    x = lb.asarray(normal(rng, (3, 3)), device=device)
    for ord in (3, "max", True):
        with pytest.raises(ValueError):
            lb.linalg.matrix_norm(x, ord=ord)
    with pytest.raises(lb.ShapeError):
        lb.linalg.matrix_norm(lb.asarray(normal(rng, (3,)), device=device))


def test_diagonal_and_trace(device, rng):
    for shape in [(4, 6), (2, 5, 3), (3, 3)]:
        for make, dtype in ((normal, "float32"), (ints, "int32")):
            host = make(rng, shape, dtype)
            x = lb.asarray(host, device=device)
            for k in range(-shape[-2] - 1, shape[-1] + 2):
                np.testing.assert_array_equal(lb.linalg.diagonal(x, offset=k).numpy(),
                                              np.linalg.diagonal(host, offset=k))
                want = np.linalg.trace(host, offset=k)
                got = lb.linalg.trace(x, offset=k)
                assert got.shape == np.shape(want) and got.dtype.name == np.asarray(want).dtype.name
                np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)
    host = ints(rng, (3, 4))
    got = lb.linalg.trace(lb.asarray(host, device=device), dtype=lb.float32)
    assert got.dtype == lb.float32 and got.item() == np.trace(host)
    with pytest.raises(lb.ShapeError):
        lb.linalg.diagonal(lb.asarray(host[0], device=device))
    with pytest.raises(lb.ShapeError):
        lb.linalg.trace(lb.asarray(host, device=device), offset=1.0)


def test_diagonal_is_a_view_fused_into_its_reader(fused, rng):
    host = normal(rng, (3, 8, 8))
    y = lb.linalg.trace(lb.asarray(host, device=fused).exp(), offset=1)
    plan = lb.explain(y)
    assert plan.kernel_count == 1 and plan.kinds() == ["reduction"]
    close(y, np.linalg.trace(np.exp(host), offset=1), rtol=1e-5, atol=1e-3)


def test_cross(device, rng):
    a, b = normal(rng, (4, 1, 3)), normal(rng, (5, 3))
    close(lb.linalg.cross(lb.asarray(a, device=device), lb.asarray(b, device=device)),
          np.linalg.cross(a, b), atol=1e-4)
    c, d = normal(rng, (2, 3, 4)), normal(rng, (3, 4))
    close(lb.linalg.cross(lb.asarray(c, device=device), lb.asarray(d, device=device), axis=-2),
          np.cross(c, d, axis=-2), atol=1e-4)
    # a non-negative axis counts in the broadcast shape (NumPy's counts in each operand)
    close(lb.linalg.cross(lb.asarray(c, device=device), lb.asarray(d, device=device), axis=1),
          np.cross(c, np.broadcast_to(d, c.shape), axis=1), atol=1e-4)
    e, f = ints(rng, (6, 3)), ints(rng, (6, 3), "int64")
    got = lb.linalg.cross(lb.asarray(e, device=device), lb.asarray(f, device=device))
    np.testing.assert_array_equal(got.numpy(), np.linalg.cross(e, f))
    assert got.dtype == lb.int64
    x = lb.asarray(c, device=device)
    with pytest.raises(lb.ShapeError, match="3 elements"):
        lb.linalg.cross(x, x)
    with pytest.raises(lb.ShapeError, match="out of range"):
        lb.linalg.cross(x, lb.asarray(d, device=device), axis=-3)
    with pytest.raises(lb.DTypeError):
        lb.linalg.cross(lb.asarray(a > 0, device=device), lb.asarray(a > 1, device=device))


def test_outer(device, rng):
    a, b = normal(rng, (5,)), ints(rng, (7,))
    close(lb.linalg.outer(lb.asarray(a, device=device), lb.asarray(b, device=device)),
          np.linalg.outer(a, b).astype(np.float32))
    with pytest.raises(lb.ShapeError):
        lb.linalg.outer(lb.asarray(a, device=device),
                        lb.asarray(np.ones((2, 2), np.float32), device=device))


def test_matrix_power(device, rng):
    host = normal(rng, (2, 4, 4)) / 4
    x = lb.asarray(host, device=device)
    for n in (0, 1, 2, 3, 5, 8):
        close(lb.linalg.matrix_power(x, n), np.linalg.matrix_power(host, n), rtol=1e-4,
              atol=1e-5)
    hi = ints(rng, (3, 3), "int64") // 3
    for n in (0, 4, 7):
        np.testing.assert_array_equal(lb.linalg.matrix_power(lb.asarray(hi, device=device),
                                                             n).numpy(),
                                      np.linalg.matrix_power(hi, n))
    for n in (-1, -3):  # the inverse (a library call) raised to -n
        close(lb.linalg.matrix_power(x + 2 * lb.eye(4, device=device), n),
              np.linalg.matrix_power(host + 2 * np.eye(4, dtype=np.float32), n), rtol=1e-4,
              atol=1e-5)
    with pytest.raises(lb.ShapeError):
        lb.linalg.matrix_power(lb.asarray(normal(rng, (3, 4)), device=device), 2)
    with pytest.raises(TypeError):
        lb.linalg.matrix_power(x, 2.0)


def test_matrix_power_records_repeated_squaring(fused, rng):
    x = lb.asarray(normal(rng, (8, 8)) / 8, device=fused)
    plan = lb.explain(lb.linalg.matrix_power(x, 13))  # 13 = 8 + 4 + 1: 3 squarings, 2 products
    assert plan.kinds().count("matmul") == 5
