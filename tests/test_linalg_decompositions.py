"""The decompositions of ``lazyburn.linalg`` (library calls: ``ir.ops`` kind ``library``)
against ``numpy.linalg`` on fresh random data, on the reference device and every fused device:
each op in float32, float64, complex64 and complex128 (WGSL refuses the 64-bit parts), batched,
square and rectangular; the places a library call sits in a plan (after element-wise
producers, a matmul and a view; before element-wise, reduction and matmul consumers; several
results of one call); what ``explain`` says runs it; empty matrices, large ones, non-finite
entries; the errors (singular and non-positive-definite matrices at sync, naming the user's
line; dtypes and shapes at record time); ``jit`` replay and gradients on the fused devices.

Eigenvectors and singular vectors are each defined up to a sign, or for complex ones a phase
(the library's choice, which differs between LAPACK and the GPU's library): they are compared
after turning each vector so that its largest entry is real and positive, besides checking that
the factors multiply back to the input.
"""
from __future__ import annotations

import sys

import numpy as np
import pytest

import lazyburn as lb
from lazyburn.ir.ops import LIBRARY

TOL = {"float32": dict(rtol=2e-4, atol=2e-5), "float64": dict(rtol=1e-10, atol=1e-12)}
TOL.update(complex64=TOL["float32"], complex128=TOL["float64"])


def holds(device, dtype) -> bool:
    return not (dtype in ("float64", "complex128") and device.startswith("webgpu"))


def normal(rng, shape, dtype):
    """Standard normal values (complex: both parts)."""
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def general(rng, shape, dtype):
    """Matrices well away from singular: standard normal plus 3 on the diagonal."""
    return (normal(rng, shape, dtype) + 3 * np.eye(shape[-1])).astype(dtype)


def spd(rng, shape, dtype):
    """Hermitian (symmetric) positive-definite matrices with distinct eigenvalues."""
    b = normal(rng, shape, dtype)
    return (b @ np.swapaxes(b, -1, -2).conj() + shape[-1] * np.eye(shape[-1])).astype(dtype)


def phases(vectors, axis):
    """Per vector along ``axis``: the phase (for real vectors the sign) of its largest-
    magnitude entry, the convention the comparisons share (a vector divided by it)."""
    pick = np.take_along_axis(vectors, np.abs(vectors).argmax(axis, keepdims=True), axis)
    return pick / np.abs(pick)


def signed(vectors, axis):
    """``vectors`` with each vector along ``axis`` turned so that its largest-magnitude entry
    is real and positive."""
    return vectors / phases(vectors, axis)


def close(got, want, dtype, scale=1.0):
    got = np.asarray(got)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype,
                                                                 want.shape, want.dtype)
    tol = TOL[str(dtype)]
    np.testing.assert_allclose(got, want, rtol=tol["rtol"], atol=tol["atol"] * scale)


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128"])
def test_each_decomposition_matches_numpy(device, dtype, rng):
    if not holds(device, dtype):
        with pytest.raises(lb.DTypeError):
            lb.linalg.inv(lb.asarray(general(rng, (3, 3), dtype), device=device)).numpy()
        return
    real = np.dtype(dtype).type(0).real.dtype  # the parts' dtype
    a, s = general(rng, (2, 4, 4), dtype), spd(rng, (2, 4, 4), dtype)
    tall, wide = normal(rng, (3, 5, 3), dtype), normal(rng, (5, 3), dtype)
    b = normal(rng, (2, 4, 3), dtype)
    x, sx, bx = (lb.asarray(v, device=device) for v in (a, s, b))

    close(lb.linalg.inv(x).numpy(), np.linalg.inv(a), dtype)
    close(lb.linalg.solve(x, bx).numpy(), np.linalg.solve(a, b), dtype)
    close(lb.linalg.solve(x, bx[0, :, 0]).numpy(),
          np.linalg.solve(a, b[0, :, 0][:, None])[..., 0], dtype)
    close(lb.linalg.det(x).numpy(), np.linalg.det(a), dtype, scale=100)
    sign, logabs = lb.linalg.slogdet(-x)
    want = np.linalg.slogdet(-a)
    assert logabs.dtype == lb.dtype(str(real))
    close(sign.numpy(), want.sign, dtype)
    close(logabs.numpy(), want.logabsdet, real)
    for upper in (False, True):
        close(lb.linalg.cholesky(sx, upper=upper).numpy(), np.linalg.cholesky(s, upper=upper),
              dtype, scale=10)
    close(lb.linalg.eigvalsh(sx).numpy(), np.linalg.eigvalsh(s), real, scale=10)
    w, q = lb.linalg.eigh(sx)
    want = np.linalg.eigh(s)
    close(w.numpy(), want.eigenvalues, real, scale=10)
    close(signed(q.numpy(), -2), signed(want.eigenvectors, -2), dtype, scale=10)
    for m in (tall, wide):
        mx = lb.asarray(m, device=device)
        close(lb.linalg.svdvals(mx).numpy(), np.linalg.svd(m, compute_uv=False), real, 10)
        u, sv, vh = lb.linalg.svd(mx, full_matrices=False)
        want = np.linalg.svd(m, full_matrices=False)
        close(sv.numpy(), want.S, real, 10)
        # per singular triple, U's column divided by a phase and Vh's row multiplied by it
        p, pw = phases(u.numpy(), -2), phases(want.U, -2)
        close(u.numpy() / p, want.U / pw, dtype, 10)
        close(vh.numpy() * np.swapaxes(p, -1, -2), want.Vh * np.swapaxes(pw, -1, -2), dtype,
              10)
        u, sv, vh = lb.linalg.svd(mx)  # full: the extra columns are any orthonormal basis
        k = min(m.shape[-2:])
        close((u[..., :k] * sv[..., None, :].astype(dtype) @ vh[..., :k, :]).numpy(), m,
              dtype, 10)
        close((u.mT.conj() @ u).numpy(), np.broadcast_to(np.eye(m.shape[-2], dtype=dtype),
                                                          u.shape), dtype, 10)
        for mode in ("reduced", "complete"):
            q, r = lb.linalg.qr(mx, mode=mode)
            want = np.linalg.qr(m, mode=mode)
            assert q.shape == want.Q.shape and r.shape == want.R.shape
            close((q @ r).numpy(), m, dtype, 10)
            k = min(m.shape[-2:])
            d = np.diagonal(r.numpy(), axis1=-2, axis2=-1)
            dw = np.diagonal(want.R, axis1=-2, axis2=-1)
            close(q.numpy()[..., :k] * (d / np.abs(d))[..., None, :],
                  want.Q[..., :k] * (dw / np.abs(dw))[..., None, :], dtype, 10)
        close(lb.linalg.pinv(mx).numpy(), np.linalg.pinv(m), dtype, 10)
    low = (rng.standard_normal((3, 5, 2)) @ rng.standard_normal((3, 2, 4))).astype(dtype)
    rank = lb.linalg.matrix_rank(lb.asarray(low, device=device))
    assert rank.dtype == lb.int64
    np.testing.assert_array_equal(rank.numpy(), np.linalg.matrix_rank(low))


def test_integer_matrices_are_decomposed_in_the_default_float_dtype(device, rng):
    a = rng.integers(-4, 5, (3, 3)) + 10 * np.eye(3, dtype=np.int64)
    got = lb.linalg.inv(lb.asarray(a.astype(np.int32), device=device))
    assert got.dtype == lb.float32
    close(got.numpy(), np.linalg.inv(a).astype(np.float32), "float32")


def test_rank_and_pseudo_inverse_cut_off_at_rtol(device, rng):
    """``rtol`` as a float or as a tensor of one tolerance per matrix (the batch shape).

    The matrices are U diag(4, 1.5, 0.01, 0.005) V^T with random orthonormal U and V: rank 4
    with two small singular values, far from every cut-off, and a condition number of 800, so
    that float32 pseudo-inverses from two libraries agree within the tolerance (about eps x
    800 relative; random near-singular matrices put no bound on it)."""
    u = np.linalg.qr(rng.standard_normal((3, 5, 4)))[0]
    v = np.linalg.qr(rng.standard_normal((3, 4, 4)))[0]
    low = ((u * np.array([4.0, 1.5, 1e-2, 5e-3])) @ np.swapaxes(v, -1, -2)).astype(np.float32)
    x = lb.asarray(low, device=device)
    rtol = np.array([1e-6, 1e-1, 1e-6], np.float32)
    for r, t in ((None, None), (0.5, 0.5), (rtol, lb.asarray(rtol, device=device))):
        want = np.linalg.matrix_rank(low, rtol=r)
        np.testing.assert_array_equal(lb.linalg.matrix_rank(x, rtol=t).numpy(), want)
        close(lb.linalg.pinv(x, rtol=t).numpy(), np.linalg.pinv(low, rtol=r), "float32",
              1e4 if r is None or r is rtol else 10)
    assert lb.linalg.matrix_rank(x, rtol=lb.asarray(rtol, device=device)).numpy().tolist() == \
        [4, 2, 4]
    assert lb.linalg.matrix_rank(x, rtol=0.5).numpy().tolist() == [1, 1, 1]


def test_one_triangle_is_read_as_the_libraries_read_it(device, rng):
    """eigh, eigvalsh and cholesky read the lower triangle, cholesky(upper=True) the upper
    one (LAPACK's, NumPy's and PyTorch's convention): the other triangle never matters."""
    s = spd(rng, (2, 4, 4), "float32")
    noise = rng.standard_normal((2, 4, 4)).astype(np.float32) * 50
    lower, upper = s + np.triu(noise, 1), s + np.tril(noise, -1)
    close(lb.linalg.eigvalsh(lb.asarray(lower, device=device)).numpy(),
          np.linalg.eigvalsh(lower), "float32", 10)
    close(lb.linalg.cholesky(lb.asarray(lower, device=device)).numpy(),
          np.linalg.cholesky(s), "float32", 10)
    close(lb.linalg.cholesky(lb.asarray(upper, device=device), upper=True).numpy(),
          np.linalg.cholesky(s, upper=True), "float32", 10)


def test_a_library_call_sits_between_fused_kernels(fused, rng):
    """Its producers are stored by a kernel before it, its consumers read its result stored:
    nothing is fused into the library call, and explain names what runs it."""
    a, b = general(rng, (2, 4, 4), "float32"), rng.standard_normal((4, 4)).astype(np.float32)
    x, y = lb.asarray(a, device=fused), lb.asarray(b, device=fused)
    out = lb.linalg.inv(x * 0.5 + y.exp() * 0.01) * 2 + 1
    plan = lb.explain(out)
    assert plan.kinds() == ["elementwise", "library", "elementwise"]
    assert plan.library_calls == 1 and plan.generated_kernels == 2
    engine = "torch.linalg on the device" if fused.startswith("cuda") else \
        "numpy.linalg (LAPACK) on the host"
    assert f"library(inv)  library: {engine}" in str(plan)
    close(out.numpy(), np.linalg.inv(a * 0.5 + np.exp(b) * 0.01) * 2 + 1, "float32")

    # from a matmul; into a reduction and a matmul
    prod = lb.linalg.inv(x @ x.mT + y)
    out = [prod.sum(-1), prod @ y]
    plan = lb.explain(*out)
    assert plan.kinds()[:2] == ["matmul", "library"]  # the sum fused on write into the matmul
    assert sorted(plan.kinds()[2:]) == ["matmul", "reduction"]
    assert [o.role for o in plan.kernels[0].ops] == ["anchor", "fused on write"]
    want = np.linalg.inv(a @ np.swapaxes(a, -1, -2) + b)
    close(out[0].numpy(), want.sum(-1), "float32", 10)
    close(out[1].numpy(), want @ b, "float32", 10)

    # a realized input is read as it is; a view of it is stored contiguous first
    assert lb.explain(lb.linalg.det(x)).kinds() == ["library"]
    t = lb.linalg.det(x.mT[:, ::-1])
    assert lb.explain(t).kinds() == ["elementwise", "library"]
    close(t.numpy(), np.linalg.det(np.swapaxes(a, -1, -2)[:, ::-1]), "float32", 100)


def test_several_results_of_one_call_are_views_of_its_node(fused, rng):
    s = spd(rng, (3, 5, 5), "float32")
    w, q = lb.linalg.eigh(lb.asarray(s, device=fused))
    back = (q * w[..., None, :]) @ q.mT
    plan = lb.explain(back)
    assert plan.kinds().count("library") == 1 and plan.library_calls == 1
    close(back.numpy(), s, "float32", 100)


def test_zero_size_matrices_need_no_library_call(device):
    for fn, shape in [(lb.linalg.det, (2, 0, 0)), (lambda t: lb.linalg.slogdet(t)[1], (0, 0)),
                      (lb.linalg.inv, (0, 3, 3)), (lb.linalg.inv, (0, 0)),
                      (lambda t: lb.linalg.svd(t).U, (3, 0)),
                      (lambda t: lb.linalg.svd(t).Vh, (0, 2)),
                      (lambda t: lb.linalg.qr(t, mode="complete").Q, (3, 0)),
                      (lambda t: lb.linalg.eigh(t).eigenvectors, (2, 0, 0)),
                      (lb.linalg.svdvals, (4, 0)), (lambda t: lb.linalg.solve(t, t), (0, 0))]:
        got = fn(lb.zeros(shape, device=device))
        want = fn(lb.zeros(shape, device="numpy")).numpy()
        assert got.shape == want.shape
        assert not recorded_ops([got]) & LIBRARY
        np.testing.assert_array_equal(got.numpy(), want)
    np.testing.assert_array_equal(lb.linalg.det(lb.zeros((2, 0, 0), device=device)).numpy(),
                                  np.linalg.det(np.zeros((2, 0, 0))))
    np.testing.assert_array_equal(lb.linalg.svd(lb.zeros((3, 0), device=device)).U.numpy(),
                                  np.eye(3, dtype=np.float32))


def test_large_matrices(device, rng):
    # Entries of variance 1/n keep the singular values within about [1, 3] at any n; with
    # standard normal entries plus a diagonal, the condition number grows with n and some seeds
    # reach thousands, beyond what a float32 tolerance can hold for any library.
    a = (normal(rng, (192, 192), "float64") / np.sqrt(192) + 2 * np.eye(192)).astype(np.float32)
    x = lb.asarray(a, device=device)
    close(lb.linalg.inv(x).numpy(), np.linalg.inv(a), "float32", 10)
    close(lb.linalg.svdvals(x).numpy(), np.linalg.svd(a, compute_uv=False), "float32", 100)


def test_a_non_finite_entry_read_gives_nan_results_for_its_matrix(device, rng):
    """Every device gives nan for every result of a matrix with a nan or an infinity among the
    entries its decomposition reads (the libraries disagree there), and computes the other
    matrices of the batch as usual."""
    a = general(rng, (3, 3, 3), "float32")
    a[0, 0, 1] = np.nan  # above the diagonal: read by inv, det, svd; not by eigvalsh, cholesky
    a[2, 2, 0] = np.inf  # below it: read by every decomposition
    x = lb.asarray(a, device=device)
    s = lb.asarray(spd(rng, (3, 3, 3), "float32"), device=device)
    for got in (lb.linalg.inv(x), lb.linalg.det(x), lb.linalg.svdvals(x),
                lb.linalg.slogdet(x).logabsdet, lb.linalg.svd(x).U, lb.linalg.qr(x).R,
                lb.linalg.solve(s, x)):
        got = got.numpy()
        assert np.isnan(got[0]).all() and np.isnan(got[2]).all() and np.isfinite(got[1]).all()
    close(lb.linalg.inv(x)[1].numpy(), np.linalg.inv(a[1]), "float32")
    sym = np.tril(a) + np.swapaxes(np.tril(a, -1), -1, -2)  # the matrices eigvalsh reads
    w = lb.linalg.eigvalsh(x).numpy()
    assert np.isnan(w[2]).all() and not np.isnan(w[:2]).any()
    close(w[:2], np.linalg.eigvalsh(sym[:2]), "float32", 10)
    c = lb.linalg.cholesky(lb.asarray(np.where(np.isfinite(a), spd(rng, (3, 3, 3), "float32"),
                                               a), device=device)).numpy()
    assert np.isfinite(c[:2]).all() and np.isnan(c[2]).all()


def test_a_matrix_the_library_cannot_decompose_raises_at_sync_naming_the_line(device, rng):
    singular = np.ones((2, 3, 3), np.float32)
    y = lb.linalg.inv(lb.asarray(singular, device=device)) + 1
    line = f"test_linalg_decompositions.py:{sys._getframe().f_lineno - 1}"
    for _ in range(2):  # nothing was computed: a second read raises again
        with pytest.raises(lb.LinAlgError, match="linalg.inv") as e:
            y.numpy()
        assert e.value.origin.endswith(line)
    assert y.is_pending
    with pytest.raises(lb.LinAlgError, match="linalg.cholesky"):
        lb.linalg.cholesky(lb.asarray(-spd(rng, (3, 3), "float32"), device=device)).numpy()
    with pytest.raises(ValueError):  # as NumPy's LinAlgError is
        lb.linalg.solve(lb.asarray(singular, device=device),
                        lb.asarray(np.ones((2, 3, 1), np.float32), device=device)).numpy()
    # a singular matrix has a determinant: 0, and slogdet's sign 0 with logabsdet -inf
    sign, logabs = lb.linalg.slogdet(lb.asarray(singular, device=device))
    np.testing.assert_array_equal(sign.numpy(), [0, 0])
    np.testing.assert_array_equal(logabs.numpy(), [-np.inf, -np.inf])


def test_bad_input_is_refused_where_it_is_recorded(device, rng):
    x = lb.asarray(general(rng, (3, 3), "float32"), device=device)
    with pytest.raises(lb.ShapeError, match="square"):
        lb.linalg.inv(x[:, :2])
    with pytest.raises(lb.ShapeError, match="stack of matrices"):
        lb.linalg.svd(x[0])
    with pytest.raises(lb.ShapeError, match="x2"):
        lb.linalg.solve(x, x[:2, :])
    with pytest.raises(lb.ShapeError, match="x2"):
        lb.linalg.solve(x, x[0, :2])
    with pytest.raises(ValueError, match="mode"):
        lb.linalg.qr(x, mode="r")
    if not device.startswith("webgpu"):
        with pytest.raises(lb.DTypeError, match="float16"):
            lb.linalg.det(x.astype("float16"))


def test_jit_replays_library_calls_on_fresh_data(fused, rng):
    f = lb.jit(lambda t: lb.linalg.inv(t * 2) @ t + 1)
    for _ in range(3):
        a = general(rng, (2, 4, 4), "float32")
        close(f(lb.asarray(a, device=fused)).numpy(), np.linalg.inv(a * 2) @ a + 1, "float32",
              10)


def test_gradients_on_a_fused_device_match_the_reference(fused, rng):
    a, b = general(rng, (2, 3, 3), "float32"), rng.standard_normal((3, 2)).astype(np.float32)
    grads = {}
    for device in ("numpy", fused):
        x = lb.tensor(a, device=device, requires_grad=True)
        y = lb.tensor(b, device=device, requires_grad=True)
        loss = (lb.linalg.solve(x, y) ** 2).sum() + lb.linalg.slogdet(x)[1].sum() + \
            lb.linalg.inv(x).sum() + lb.linalg.eigvalsh(x + x.mT).max()
        loss.backward()
        grads[device] = (x.grad.numpy(), y.grad.numpy())
    for got, want in zip(grads[fused], grads["numpy"]):
        close(got, want, "float32", 10)


def recorded_ops(tensors) -> set:
    seen, stack = set(), [t.node for t in tensors]
    while stack:
        n = stack.pop()
        seen.add(n.op)
        stack.extend(n.inputs)
    return seen


def test_every_library_op_is_covered():
    """The ops test_each_decomposition_matches_numpy calls record every library op but the
    Fourier transforms' (tests/test_fft.py)."""
    x = lb.zeros((2, 3, 3), device="numpy") + lb.eye(3, device="numpy")
    outs = [lb.linalg.cholesky(x), lb.linalg.inv(x), lb.linalg.solve(x, x), lb.linalg.det(x),
            lb.linalg.slogdet(x)[0], lb.linalg.eigh(x)[0], lb.linalg.eigvalsh(x),
            lb.linalg.svdvals(x), lb.linalg.qr(x)[0], lb.linalg.svd(x)[0]]
    missing = LIBRARY - {"fft"} - recorded_ops(outs)
    assert not missing, sorted(missing)


def test_complex_matrices_reach_the_library_as_their_buffers_hold_them(fused, rng):
    """On a fused device the complex lowering hands the library a complex matrix's parts
    joined (its buffer's layout) and splits the complex result it writes."""
    a = general(rng, (2, 3, 3), "complex64")
    y = lb.linalg.inv(lb.asarray(a, device=fused) * (1 + 2j)) + 1j
    plan = lb.explain(y)
    assert plan.library_calls == 1 and plan.kinds().count("library") == 1
    close(y.numpy(), np.linalg.inv(a * (1 + 2j)) + 1j, "complex64")


def test_the_dump_names_each_library_call(fused, rng, tmp_path):
    a = general(rng, (2, 3, 3), "float32")
    x = lb.asarray(a, device=fused)
    y = lb.linalg.inv(x * 2) + lb.linalg.det(x)[:, None, None]
    with lb.dump(tmp_path):
        got = y.numpy()
    close(got, np.linalg.inv(a * 2) + np.linalg.det(a)[:, None, None], "float32", 100)
    engine = "torch.linalg on the device" if fused.startswith("cuda") else \
        "numpy.linalg (LAPACK) on the host"
    calls = sorted(f.read_text() for f in tmp_path.glob("*_library_*.txt"))
    assert len(calls) == 2
    assert all(f"# executed by: library: {engine}\n" in text for text in calls)
    assert any("inv[2, 3, 3]:float32 [anchor]" in text for text in calls)
    assert any("det[2]:float32 [anchor]" in text for text in calls)
    assert all("test_linalg_decompositions.py" in text for text in calls)
