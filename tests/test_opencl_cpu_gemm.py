"""The register-blocked GEMM of CPU OpenCL devices (``codegen.opencl.cpu_gemm_form``): every
register block the autotuner may pick, on sizes that are not multiples of a block (1, 7, 33,
129, 1000), with fused prologues and epilogues, batched and with a shared B; the operands it
cannot take as vectors fall back to the tiled kernel; the autotuner's choice between it and
BLAS. Values against NumPy in float64 (float32 accumulation in another order: within a few
ulps of the sum of the products' magnitudes); each test checks which kernel ran."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.special

import lazyburn as lb
from lazyburn.codegen import opencl as cl_codegen
from lazyburn.runtime import opencl_tuning
from fused_devices import FUSED_DEVICES

DEVICE = "opencl:0"
pytestmark = pytest.mark.skipif(DEVICE not in FUSED_DEVICES, reason="no OpenCL device")


@pytest.fixture
def backend():
    b = lb.runtime.backend(DEVICE)
    if not b.is_cpu:
        pytest.skip("the register-blocked GEMM is for CPU devices")
    return b


def force_block(monkeypatch, name: str | None):
    """Run matmul groups with the register-blocked candidate ``name`` (None: the first), as
    the autotuner would launch it. Returns the names of the candidates seen."""
    from lazyburn.runtime import opencl

    real = opencl.default_params
    seen = []

    def params(backend, k):
        if k.kind != "matmul":
            return real(backend, k)
        blocks = opencl_tuning.cpu_blocks(backend, k.spec)
        for found, p, _ in blocks:
            if name is None or found == name:
                seen.append(found)
                return p
        return real(backend, k)
    monkeypatch.setattr(opencl, "default_params", params)
    return seen


def run(fn, *arrays):
    """``fn`` on ``arrays`` on the OpenCL device: (result, the compiled matmul kernel)."""
    backend = lb.runtime.backend(DEVICE)
    inputs = [lb.tensor(a, device=DEVICE) for a in arrays]
    for t in inputs:
        t.numpy()
    backend.plans.clear()
    try:
        got = fn(*inputs).numpy()
        (plan,) = backend.plans._plans.values()
        (k,) = [k for k in plan.kernels if k.kind == "matmul"]
        return got, k
    finally:
        backend.plans.clear()


def blocked(k) -> bool:
    """Whether the matmul group ran the register-blocked kernel (one work-item per group)."""
    launches = getattr(k.compiled, "launches", None)
    return bool(launches) and all(local and set(local) == {1} for _, _, local, _ in launches)


def check(got, want, a_abs, b_abs, k):
    """``got`` within float32 accumulation error of ``want``: a few ulps of K times the sum
    of the products' magnitudes (``a_abs @ b_abs``)."""
    bound = 4 * np.finfo(np.float32).eps * (k + 2) * (a_abs @ b_abs) + 1e-6
    err = np.abs(got.astype(np.float64) - want)
    assert got.shape == want.shape
    assert np.all(err <= np.broadcast_to(bound, err.shape)), float((err - bound).max())


def gelu(x):
    return 0.5 * x * (1 + scipy.special.erf(x / np.sqrt(2)))


SIZES = [(1, 1, 1), (7, 33, 129), (33, 129, 7), (129, 7, 33), (1000, 33, 7), (7, 1000, 33),
         (33, 7, 1000), (129, 129, 129), (1, 1000, 129)]
BLOCKS = [(form, i) for form, blocks in opencl_tuning.CPU_BLOCKS[32].items()
          for i in range(len(blocks))]


@pytest.mark.parametrize("mkn", SIZES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("layout", ["a@w", "a@w.T"])
def test_odd_sizes_with_a_fused_bias_gelu_epilogue(backend, rng, monkeypatch, mkn, layout):
    m, k, n = mkn
    a = rng.standard_normal((m, k), dtype=np.float32)
    w = rng.standard_normal((k, n) if layout == "a@w" else (n, k), dtype=np.float32)
    bias = rng.standard_normal(n, dtype=np.float32)
    force_block(monkeypatch, None)
    if layout == "a@w":
        got, kern = run(lambda x, w, c: lb.gelu(x @ w + c), a, w, bias)
        wk = w.astype(np.float64)
    else:
        got, kern = run(lambda x, w, c: lb.gelu(x @ w.mT + c), a, w, bias)
        wk = w.T.astype(np.float64)
    assert blocked(kern)
    expect_form = "outer" if layout == "a@w" or n == 1 or k == 1 else "inner"
    assert cl_codegen.cpu_gemm_form(kern.spec) == expect_form
    h = a.astype(np.float64) @ wk + bias
    # gelu's slope is at most 1.13: the product's error bound carries over
    bound = 4 * np.finfo(np.float32).eps * ((k + 2) * (np.abs(a) @ np.abs(wk)) + np.abs(h)) \
        * 1.13 + 1e-6
    assert np.all(np.abs(got - gelu(h)) <= bound)


@pytest.mark.parametrize("form, index", BLOCKS)
@pytest.mark.parametrize("shape", ["ragged", "narrow", "thin", "short"])
def test_every_register_block_on_ragged_edges(backend, rng, monkeypatch, form, index, shape):
    """No block divides M, N or K (K % 16 leaves a tail for the inner form). Where C is a block
    or more on each side ("ragged"), one kernel whose last blocks overlap their neighbours;
    else the full blocks, then the edge kernel over the last column and row of blocks: N
    under a block but at least 16 lanes ("narrow": B's vector ending at N, lanes moved), N
    under 16 ("thin": B a lane at a time), M under a block ("short")."""
    (rows, cols), _ = opencl_tuning.cpu_block_table(backend)[form][index]
    cols = cols * opencl_tuning.cpu_lanes(backend) if form == "outer" else cols
    m, k, n = {"ragged": (37, 45, 101), "narrow": (37, 45, max(cols - 5, 17)),
               "thin": (37, 45, 9), "short": (rows - 1, 45, 101)}[shape]
    name = f"{form}={rows}x{cols}"
    a = rng.standard_normal((m, k), dtype=np.float32)
    w = rng.standard_normal((k, n) if form == "outer" else (n, k), dtype=np.float32)
    r = rng.standard_normal((m, n), dtype=np.float32)
    seen = force_block(monkeypatch, name)
    if form == "outer":
        got, kern = run(lambda x, w, r: (x @ w) * 0.5 - r, a, w, r)
        wk = w.astype(np.float64)
    else:
        got, kern = run(lambda x, w, r: (x @ w.mT) * 0.5 - r, a, w, r)
        wk = w.T.astype(np.float64)
    assert seen == [name] and blocked(kern)
    if m >= rows and n >= cols:
        want = [(-(-m // rows), -(-n // cols), 1)]
    else:
        full_m, full_n = m // rows, n // cols
        edge = (-(-m // rows) if n % cols else 0) + (full_n if m % rows else 0)
        want = ([(full_m, full_n, 1)] if full_m and full_n else []) + [(edge, 1)]
    assert [g for _, g, _, _ in kern.compiled.launches] == want
    check(got, (a.astype(np.float64) @ wk) * 0.5 - r, np.abs(a) * 0.5, np.abs(wk), k)


@pytest.mark.parametrize("form, index", BLOCKS)
def test_the_blocks_for_eight_lanes(backend, rng, monkeypatch, form, index):
    # what a device with AVX2 (8 float lanes, 16 vector registers) runs, here too
    monkeypatch.setattr(opencl_tuning, "cpu_lanes", lambda backend: 8)
    (rows, cols), _ = opencl_tuning.CPU_BLOCKS[16][form][index]
    name = f"{form}={rows}x{cols * 8 if form == 'outer' else cols}"
    m, k, n = 29, 21, 43
    a = rng.standard_normal((m, k), dtype=np.float32)
    w = rng.standard_normal((k, n) if form == "outer" else (n, k), dtype=np.float32)
    seen = force_block(monkeypatch, name)
    got, kern = run(lambda x, w: x @ (w if form == "outer" else w.mT), a, w)
    wk = (w if form == "outer" else w.T).astype(np.float64)
    assert seen == [name] and blocked(kern) and "float8" in kern.compiled.source
    check(got, a.astype(np.float64) @ wk, np.abs(a), np.abs(wk), k)


@pytest.mark.parametrize("case", ["a prologue", "b prologue", "float16 b", "batched",
                                  "shared b", "float16 a @ w.T"])
def test_prologues_and_batches(backend, rng, monkeypatch, case):
    force_block(monkeypatch, None)
    a = rng.standard_normal((3, 19, 40), dtype=np.float32)
    w = rng.standard_normal((3, 40, 70), dtype=np.float32)
    a64, w64 = a.astype(np.float64), w.astype(np.float64)
    if case == "a prologue":  # any expression of A: read one value at a time
        got, kern = run(lambda x, w: lb.exp(x * 0.25) @ w, a, w)
        a64 = np.exp(a64 * 0.25)
    elif case == "b prologue":  # vector arithmetic on the B row segment
        got, kern = run(lambda x, w: x @ (w * 2.0 - 1.0), a, w)
        w64 = w64 * 2.0 - 1.0
    elif case == "float16 b":
        w16 = w.astype(np.float16)
        got, kern = run(lambda x, w: x @ w.astype("float32"), a, w16)
        w64 = w16.astype(np.float64)
    elif case == "float16 a @ w.T":  # both operands in half vectors along K, a half output
        a16, w16 = a.astype(np.float16), w.mT.copy().astype(np.float16)
        got, kern = run(lambda x, w: x @ w.mT, a16, w16)
        assert got.dtype == np.float16 and cl_codegen.cpu_gemm_form(kern.spec) == "inner"
        want = a16.astype(np.float64) @ w16.astype(np.float64).mT
        # the float32 sum, then one rounding to float16
        bound = np.abs(want) * 2.0 ** -11 + 4 * np.finfo(np.float32).eps * 42 * \
            (np.abs(a16.astype(np.float64)) @ np.abs(w16.astype(np.float64)).mT) + 1e-7
        assert blocked(kern) and np.all(np.abs(got - want) <= bound)
        return
    elif case == "batched":
        got, kern = run(lambda x, w: lb.tanh(x @ w), a, w)
    else:
        w = w[0]
        w64 = w.astype(np.float64)
        got, kern = run(lambda x, w: x @ w, a, w)
    assert blocked(kern) and cl_codegen.cpu_gemm_form(kern.spec) == "outer"
    want = a64 @ w64
    if case == "batched":
        want = np.tanh(want)
    check(got, want, np.abs(a64), np.abs(w64), 40)


@pytest.mark.parametrize("case", ["relu of b", "every second column of b"])
def test_an_operand_it_cannot_vectorize_falls_back_to_the_tiled_kernel(backend, rng,
                                                                        monkeypatch, case):
    from lazyburn.runtime import opencl

    # B does not run along K (no inner form), and along N it is a maximum (no vector
    # spelling here) or steps by two elements (no vector load)
    a = rng.standard_normal((24, 20), dtype=np.float32)
    w = rng.standard_normal((20, 60), dtype=np.float32)
    seen = force_block(monkeypatch, None)
    if case == "relu of b":
        got, kern = run(lambda x, w: x @ lb.relu(w), a, w)
        wk = np.maximum(w.astype(np.float64), 0)
    else:
        got, kern = run(lambda x, w: x @ w[:, ::2], a, w)
        wk = w[:, ::2].astype(np.float64)
    assert kern.spec.b.op != "load" or case != "relu of b"  # the prologue is fused
    assert cl_codegen.cpu_gemm_form(kern.spec) is None and not seen and not blocked(kern)
    check(got, a.astype(np.float64) @ wk, np.abs(a), np.abs(wk), 20)
    # explain says which kernel and why
    x, y = lb.tensor(a, device=DEVICE), lb.tensor(w, device=DEVICE)
    (e,) = lb.explain(x @ (lb.relu(y) if case == "relu of b" else y[:, ::2])).executions
    assert e.engine == f"generated OpenCL C ({opencl.TILED_ON_CPU})"
    assert str(kern.compiled.execution) == e.engine


@pytest.mark.parametrize("case", ["strided", "grouped half", "padded 1x1"])
def test_a_convolution_window_is_written_out_for_the_register_blocks(backend, rng, case):
    """A convolution's window operand (gathers along N) is written out by a kernel of its own,
    then the outer form reads it (``WrittenOperandMatmul``), with the bias and ReLU fused on
    write: the default above the library threshold; values against a float64 reference."""
    from lazyburn.runtime import opencl

    x_shape, w_shape, stride, padding, groups, dtype = {
        "strided": ((2, 16, 15, 13), (40, 16, 3, 3), 2, 1, 1, np.float32),
        "grouped half": ((1, 32, 12, 12), (48, 16, 3, 3), 1, 1, 2, np.float16),
        "padded 1x1": ((1, 64, 9, 9), (96, 64, 1, 1), 1, 1, 1, np.float32),
    }[case]
    x = rng.standard_normal(x_shape).astype(dtype)
    w = (rng.standard_normal(w_shape) / np.sqrt(np.prod(w_shape[1:]))).astype(dtype)
    bias = rng.standard_normal(w_shape[0]).astype(dtype)
    got, kern = run(lambda x, w, c: lb.relu(lb.conv2d(x, w, c, stride, padding, 1, groups)),
                    x, w, bias)
    assert isinstance(kern.compiled, opencl.WrittenOperandMatmul)
    assert kern.compiled.execution is opencl.WRITTEN_B
    assert cl_codegen.cpu_gemm_form(kern.spec) is None
    want = _conv_reference(x.astype(np.float64), w.astype(np.float64), stride, padding, groups)
    want = np.maximum(want + bias.astype(np.float64)[:, None, None], 0)
    tol = 2e-2 if dtype == np.float16 else 1e-4
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol)


def _conv_reference(x, w, stride, padding, groups):
    """NCHW convolution in NumPy (float64), PyTorch's semantics."""
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    kh, kw = w.shape[2:]
    win = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))
    win = win[:, :, ::stride, ::stride]
    cg, og = x.shape[1] // groups, w.shape[0] // groups
    outs = [np.einsum("nchwij,ocij->nohw", win[:, g * cg:(g + 1) * cg], w[g * og:(g + 1) * og])
            for g in range(groups)]
    return np.concatenate(outs, axis=1)


def test_small_matmuls_default_to_the_register_blocks(backend, rng):
    a = rng.standard_normal((12, 33), dtype=np.float32)
    w = rng.standard_normal((33, 20), dtype=np.float32)
    got, kern = run(lambda x, w: lb.relu(x @ w), a, w)
    assert blocked(kern)
    check(got, np.maximum(a.astype(np.float64) @ w, 0), np.abs(a), np.abs(w), 33)
    plan = lb.explain(lb.relu(lb.tensor(a, device=DEVICE) @ lb.tensor(w, device=DEVICE)))
    assert [e.engine for e in plan.executions] == ["generated OpenCL C"]


@pytest.mark.parametrize("winner", ["outer=6x64", "library"])
def test_the_autotuner_chooses_between_register_blocks_and_blas(backend, rng, monkeypatch,
                                                               tmp_path, winner):
    from lazyburn.runtime import opencl

    if opencl_tuning.cpu_lanes(backend) != 16:
        pytest.skip("the candidate names assume 16 float lanes")
    monkeypatch.setenv("LAZYBURN_AUTOTUNE", "1")
    monkeypatch.setenv("LAZYBURN_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("LAZYBURN_AUTOTUNE_BUDGET", "60")  # compiles on a busy machine
    names = {}

    # which candidate is faster is the machine's business; here the timing is made to say
    def launch_time(self, kernel, args):
        if isinstance(kernel, opencl.LibraryMatmul):
            return 1e-3 if winner == "library" else 1.0
        name = names.get(id(kernel))
        return 1e-3 if name == winner else 1.0
    real_build = opencl.OpenCLBackend.build

    def build(self, k, name, params, origin):
        kernel = real_build(self, k, name, params, origin)
        for n, p, _ in opencl_tuning.cpu_blocks(self, k.spec) if k.kind == "matmul" else []:
            if p == params:
                names[id(kernel)] = n
        return kernel
    monkeypatch.setattr(opencl_tuning.TunedKernel, "launch_time", launch_time)
    monkeypatch.setattr(opencl.OpenCLBackend, "build", build)
    # enough outputs to be tuned (fused.MIN_TUNED_ELEMENTS)
    a = rng.standard_normal((300, 96), dtype=np.float32)
    w = rng.standard_normal((96, 256), dtype=np.float32)
    bias = rng.standard_normal(256, dtype=np.float32)
    got, kern = run(lambda x, w, c: lb.gelu(x @ w + c), a, w, bias)
    assert isinstance(kern.compiled, opencl.LibraryMatmul) == (winner == "library")
    if winner != "library":
        assert blocked(kern) and names.get(id(kern.compiled)) == winner
    h = a.astype(np.float64) @ w + bias
    np.testing.assert_allclose(got, gelu(h), rtol=1e-4, atol=1e-4)


def test_ten_batch_sizes_share_the_register_blocked_programs(backend, rng, monkeypatch):
    """A product with a weight (its rows the batch's), one by a weight (its columns the
    batch's, that operand a transposed view, which the tiled kernel reads) and a strided
    convolution (a product per image) at ten batch sizes: the register-blocked and the tiled
    kernels take C's rows and columns as arguments, so the programs of the first size serve
    the other nine, the ragged last blocks included. (An operand stored with the batch's
    columns along its rows spells their count in its strides: its program is built again.)
    Values against float64 references."""
    from lazyburn.runtime import opencl

    monkeypatch.setenv("LAZYBURN_AUTOTUNE", "0")
    w = rng.standard_normal((33, 20), dtype=np.float32)
    kernel = (rng.standard_normal((40, 16, 3, 3)) / 12).astype(np.float32)
    bias = rng.standard_normal(40).astype(np.float32)
    W, K, C = (lb.tensor(a, device=DEVICE) for a in (w, kernel, bias))
    backend.plans.clear()
    built = []
    for batch in (3, 8, 5, 13, 6, 30, 2, 17, 9, 11):
        a = rng.standard_normal((batch, 7, 33), dtype=np.float32)
        x = rng.standard_normal((batch, 16, 15, 13)).astype(np.float32)
        before = backend.compiles + backend.program_loads
        got = lb.relu(lb.tensor(a, device=DEVICE) @ W).numpy()
        viewed = lb.relu(W.mT @ lb.tensor(a, device=DEVICE).reshape(-1, 33).mT).numpy()
        conv = lb.relu(lb.conv2d(lb.tensor(x, device=DEVICE), K, C, 2, 1)).numpy()
        built.append(backend.compiles + backend.program_loads - before)
        check(got, np.maximum(a.astype(np.float64) @ w, 0), np.abs(a), np.abs(w), 33)
        flat = a.reshape(-1, 33).T
        check(viewed, np.maximum(w.T.astype(np.float64) @ flat, 0), np.abs(w.T), np.abs(flat),
              33)
        want = _conv_reference(x.astype(np.float64), kernel.astype(np.float64), 2, 1, 1)
        np.testing.assert_allclose(conv, np.maximum(want + bias[:, None, None], 0),
                                   rtol=1e-4, atol=1e-4)
    products = [k for plan in backend.plans._plans.values() for k in plan.kernels
                if k.kind == "matmul"]
    written = [isinstance(k.compiled, opencl.WrittenOperandMatmul) for k in products]
    tiled = [not w and not blocked(k) and isinstance(k.compiled, opencl.CompiledKernel)
             for k, w in zip(products, written)]
    assert len(products) == 30 and sum(written) == sum(tiled) == 10
    assert sum(blocked(k) for k in products) == 10
    assert built[1:] == [0] * 9, built
