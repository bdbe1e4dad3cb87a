"""The Triton backend (``cuda:0``) against the NumPy reference, one test per group kind and
semantic corner.

Without a GPU the ``dev`` fixture sets ``TRITON_INTERPRET=1`` before any kernel is built, so
``cuda:0`` runs the generated kernels through Triton's interpreter on torch CPU tensors (small
shapes: the interpreter is slow). Triton reads the variable when a ``@triton.jit`` function is
created, and the runtime wraps every kernel module for the mode it runs in, so nothing depends
on import order. ``test_compiles_for_sm90`` compiles the GPU spelling of the same kernels to a
cubin, which needs no GPU either.
"""
from __future__ import annotations

import contextlib
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")

import lazyburn as lb  # noqa: E402
from lazyburn import runtime  # noqa: E402
from lazyburn.codegen import triton as tr  # noqa: E402
from lazyburn.codegen import triton_reduction as tr_reduction  # noqa: E402
from lazyburn.codegen.triton_reduction import rereads_rows  # noqa: E402
from lazyburn.fusion.kernel_ir import KernelArg  # noqa: E402
from lazyburn.ir import dtypes as dt  # noqa: E402
from lazyburn.runtime import cuda_tuning, fused  # noqa: E402
from core_support import check_row_ops, outputs_off_in_a_few_places, row_ops  # noqa: E402

RTOL = {"float32": 2e-5, "float64": 1e-9, "float16": 1e-2, "bfloat16": 2e-2}


@pytest.fixture(scope="module")
def dev(tmp_path_factory):
    """``cuda:0``: the GPU when there is one, else Triton's interpreter on the CPU."""
    keys = ("TRITON_INTERPRET", "LAZYBURN_CACHE_DIR", "LAZYBURN_AUTOTUNE",
            "TRITON_DEFAULT_FP_FUSION")
    saved = {k: os.environ.get(k) for k in keys}
    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"
    os.environ["LAZYBURN_CACHE_DIR"] = str(tmp_path_factory.mktemp("lazyburn-cache"))
    os.environ["LAZYBURN_AUTOTUNE"] = "0"
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    had = "cuda:0" in runtime._backends
    yield "cuda:0"
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    if not had:
        runtime._backends.pop("cuda:0", None)


def compare(actual: np.ndarray, expected: np.ndarray, rtol=None, atol=1e-6):
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    if expected.dtype.kind != "f" and expected.dtype.name != "bfloat16":
        np.testing.assert_array_equal(actual, expected)
        return
    rtol = RTOL[expected.dtype.name] if rtol is None else rtol
    a, e = actual.astype(np.float64), expected.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(a), np.isnan(e))
    inf = np.isinf(e)
    np.testing.assert_array_equal(a[inf], e[inf])
    ok = ~np.isnan(e) & ~inf
    np.testing.assert_allclose(a[ok], e[ok], rtol=rtol, atol=atol)


def check(dev, fn, *arrays, **tol):
    """``fn`` of lazy tensors holding ``arrays``, on ``dev`` and on the reference."""
    ref = fn(*[lb.tensor(a, device="numpy") for a in arrays])
    got = fn(*[lb.tensor(a, device=dev) for a in arrays])
    ref = ref if isinstance(ref, tuple) else (ref,)
    got = got if isinstance(got, tuple) else (got,)
    for g, r in zip(got, ref):
        assert g.device == dev
        compare(g.numpy(), r.numpy(), **tol)


@contextlib.contextmanager
def launch_params(kind, **overrides):
    """Kernels of group ``kind`` compiled inside the block use ``overrides`` (plans are cached
    per backend, so callers use shapes no other test uses)."""
    base = tr.default_params

    def patched(spec, interpret=False):
        params = base(spec, interpret)
        if spec.kind == kind:
            params.update(overrides)
        return params

    tr.default_params = patched
    try:
        yield
    finally:
        tr.default_params = base


def rand(rng, shape, dtype="float32", lo=-3.0, hi=3.0):
    return rng.uniform(lo, hi, shape).astype(dtype)


# element-wise ---------------------------------------------------------------------------------
def test_elementwise_chain(dev):
    rng = np.random.default_rng(1)

    def chain(x, y):
        z = x * 1.5 + y
        z = lb.exp(-lb.abs(z)) * lb.tanh(z)
        z = lb.where(z > 0.1, z, 0.01 * z)
        return lb.log1p(lb.abs(z)) + lb.sin(y)

    x, y = rand(rng, (37, 53)), rand(rng, (37, 53))
    x[np.abs(x * 1.5 + y) < 0.2] = 2.0  # keep z away from the where threshold
    check(dev, chain, x, y)
    assert lb.explain(chain(lb.tensor(x, device=dev), lb.tensor(y, device=dev))).kinds() \
        == ["elementwise"]


def test_unary_float_ops(dev):
    rng = np.random.default_rng(2)
    x = rand(rng, (4, 50))
    x[0, :12] = [0.5, 1.5, 2.5, -2.5, -0.5, 1e-8, -1e-8, 0.0, -0.0, 30.0, -30.0, 3.0]
    pos = np.abs(x) + 0.05

    def ops(x, p):
        return (lb.exp(x), lb.exp2(x), lb.expm1(x), lb.log(p), lb.log2(p), lb.log1p(p),
                lb.sqrt(p), lb.rsqrt(p), lb.sin(x), lb.cos(x), lb.tan(x * 0.4), lb.tanh(x),
                lb.sigmoid(x), lb.erf(x), lb.floor(x), lb.ceil(x), lb.round(x), lb.sign(x),
                lb.abs(x), -x, lb.square(x))

    check(dev, ops, x, pos)
    check(dev, ops, x.astype(np.float64), pos.astype(np.float64))


def test_binary_float_ops(dev):
    rng = np.random.default_rng(3)
    a, b = rand(rng, (3, 40)), rand(rng, (3, 40))
    a[0, :8] = [np.nan, 1.0, np.inf, -np.inf, -2.0, -0.0, 5.0, -7.5]
    b[0, :8] = [1.0, np.nan, 2.0, 2.0, 3.0, 1.0, 0.0, 2.0]
    b[b == 0] = 0.5
    b[0, 6] = 0.0

    def ops(a, b):
        return (lb.floor_divide(a, b), lb.remainder(a, b), a / b, lb.minimum(a, b),
                lb.maximum(a, b), a < b, a >= b, a == b, lb.where(a > b, a, b),
                lb.isnan(a), lb.isinf(a), lb.isfinite(a))

    check(dev, ops, a, b)
    check(dev, lambda a: (lb.floor_divide(a, 0.7), lb.remainder(a, -1.3), a ** 2, a ** 3,
                          lb.abs(a) ** 0.5, lb.minimum(a, 0.5), lb.maximum(-0.25, a),
                          lb.pow(2.0, a),
                          lb.tanh(a) + lb.expm1(a)), a)
    base = np.array([[2.0, -2.0, -2.0, 0.0, 0.0, 1.0, -1.0, 0.5, np.nan, 3.0]], np.float32)
    expo = np.array([[3.0, 3.0, 0.5, 2.0, -1.0, np.nan, np.inf, -2.0, 0.0, 1.5]], np.float32)
    check(dev, lambda a, b: lb.pow(a, b), base, expo)


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8"])
def test_int_ops(dev, dtype):
    rng = np.random.default_rng(4)
    lo = 0 if dtype == "uint8" else -9
    a = rng.integers(lo, 10, (3, 33)).astype(dtype)
    b = rng.integers(lo, 10, (3, 33)).astype(dtype)
    s = rng.integers(-2, 10, (3, 33)).astype(dtype) if dtype != "uint8" else \
        rng.integers(0, 10, (3, 33)).astype(dtype)
    e = rng.integers(0 if dtype == "uint8" else -2, 4, (3, 33)).astype(dtype)

    def ops(a, b, s, e):
        out = (lb.floor_divide(a, b), lb.remainder(a, b), lb.pow(a, e), a << s, a >> s,
               a & b, a | b, a ^ b, ~a, lb.minimum(a, b), lb.maximum(a, b), a + b * b,
               lb.abs(a), lb.sign(a))
        return out if dtype == "uint8" else out + (-a,)

    check(dev, ops, a, b, s, e)
    check(dev, lambda a: (a ** 2, a ** 3, lb.floor_divide(a, 4), lb.remainder(a, 3)), a)


def test_bool_and_casts(dev):
    rng = np.random.default_rng(5)
    x = rand(rng, (5, 21), lo=-300, hi=300)
    m = rng.random((5, 21)) < 0.5

    def ops(x, m):
        big = x > 0
        return (lb.logical_and(big, m), lb.logical_or(big, m), lb.logical_xor(big, m),
                lb.logical_not(m), x.astype(lb.int32), x.astype(lb.float16),
                x.astype(lb.bfloat16), (x * 0.01).astype(lb.float16) + 1,
                x.astype(lb.int16).astype(lb.float32), m.astype(lb.float32), x.astype(lb.bool))

    check(dev, ops, x, m)
    h = rand(rng, (5, 21), "float16")
    check(dev, lambda h: (h * 2 + 1, h.astype(lb.bfloat16) * 3, lb.exp(h)), h)


def test_views_and_gathers(dev):
    rng = np.random.default_rng(6)
    x = rand(rng, (6, 9))
    y = rand(rng, (9,))
    idx = np.array([0, -1, 3, 20, -20, 5], np.int64)

    def views(x, y, i):
        return (x.T * 2 + 1, x[::2, ::-1] + y[::-3].reshape(1, 3)[:, :1], x + y,
                lb.pad(x, ((1, 2), (0, 3)), constant_values=-1.5) * 2,
                lb.concat([x, x * 2], axis=1) + 1, lb.take(x, i, axis=1) * 1,
                lb.take_along_axis(x, lb.abs(i).reshape(6, 1) % 9, axis=1) + 0,
                lb.arange(9, device=x.device).astype(lb.float32) + y)

    check(dev, views, x, y, idx)


def test_random_uniform_is_bit_exact(dev):
    ref = lb.default_rng(123).uniform((7, 33), device="numpy").numpy()
    got = lb.default_rng(123).uniform((7, 33), device=dev).numpy()
    np.testing.assert_array_equal(got, ref)


# reductions -----------------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["sum", "prod", "max", "min", "argmax", "argmin", "any", "all"])
def test_reductions(dev, op):
    rng = np.random.default_rng(7)
    x = rand(rng, (6, 37), lo=0.5, hi=1.5) if op == "prod" else rand(rng, (6, 37))
    x[1, 5] = np.nan
    x[2, 3] = x[2, 30] = 9.0  # ties: the first index wins
    x[3] = 0.0

    def red(x):
        if op in ("any", "all"):
            return getattr(x > 0.2, op)(axis=1), getattr(x > -10, op)(axis=0)
        return getattr(x, op)(axis=1), getattr(x, op)(axis=0)

    check(dev, red, x)
    ints = rng.integers(-50, 50, (6, 37)).astype(np.int32)
    if op not in ("any", "all", "prod"):
        check(dev, red, ints)


def test_reduction_axes_and_dtypes(dev):
    rng = np.random.default_rng(8)
    x = rand(rng, (4, 5, 6))
    check(dev, lambda x: (x.sum(axis=(0, 2)), x.max(axis=0), lb.mean(x, axis=-1)), x)
    h = rand(rng, (3, 70), "float16")
    check(dev, lambda h: (h.sum(axis=1), h.max(axis=1), h.argmax(axis=1)), h)
    b = rng.random((3, 40)) < 0.5
    check(dev, lambda b: (b.argmax(axis=1), b.any(axis=1), b.max(axis=1)), b)


def test_looped_reductions(dev):
    rng = np.random.default_rng(9)
    x = rand(rng, (3, 1500))
    x[1, 700] = np.nan
    check(dev, lambda x: (x.sum(axis=1), x.max(axis=1), x.argmax(axis=1), x.argmin(axis=1),
                          lb.softmax(x, axis=-1)), x, rtol=1e-4)


def test_softmax_and_layer_norm(dev):
    rng = np.random.default_rng(10)
    x = rand(rng, (5, 48))
    w, b = rand(rng, (48,)), rand(rng, (48,))
    check(dev, lambda x, w, b: (lb.softmax(x * 0.125, axis=-1),
                                lb.layer_norm(x, (48,), w, b)), x, w, b, rtol=1e-4)
    assert lb.explain(lb.softmax(lb.tensor(x, device=dev), axis=-1)).kinds() == ["reduction"]
    h = rand(rng, (4, 40), "float16")
    check(dev, lambda h: lb.softmax(h, axis=-1), h)


# launch parameters the interpreter tests force; test_tilings_compile_for_sm90 compiles the
# GPU spelling of the same kernels with each of them
REDUCTION_TILINGS = [
    {"XBLOCK": 2, "RBLOCK": 64, "looped": False},
    {"XBLOCK": 2, "RBLOCK": 16, "looped": True},
    {"XBLOCK": 1, "RBLOCK": 32, "looped": True},
]


def reduction_tiling_graph(x):
    return (x.sum(axis=1), x.argmax(axis=1), x.min(axis=1), lb.softmax(x, axis=-1),
            (x > 1).any(axis=1), (x < 2).all(axis=1), (x > 0).argmax(axis=1))


def reduction_tiling_inputs(params):
    rng = np.random.default_rng(11)
    rows = 5 + params["RBLOCK"] // 16  # a shape of its own: plans are cached
    x = rand(rng, (rows, 50))
    x[0, 7] = np.nan
    return (x,)


def launch_id(params) -> str:
    return ",".join(f"{k}={v}" for k, v in params.items())


@pytest.mark.parametrize("params", REDUCTION_TILINGS, ids=launch_id)
def test_reduction_tilings(dev, params):
    with launch_params("reduction", **params):
        check(dev, reduction_tiling_graph, *reduction_tiling_inputs(params), rtol=1e-4)


def test_independent_stages_run_in_programs_of_their_own(dev, tmp_path):
    """A looped reduction's stages that share nothing (a training step's bias gradients, each
    with its parameter's update) run along the grid's second axis, a group each; stages one
    output reads together, or that read each other (softmax's max and sum), share one."""
    rng = np.random.default_rng(23)
    x, y = rand(rng, (70, 9)), rand(rng, (70, 9))
    x[3, 4] = np.nan

    def graph(x, y):
        return (x.sum(axis=0) * 2.0, y.max(axis=0),
                (x * y).sum(axis=0) + (y * y).sum(axis=0), lb.softmax(y, axis=0).sum(axis=0))

    (kern,) = lb.explain(*graph(lb.tensor(x, device=dev), lb.tensor(y, device=dev))).kernels
    groups = tr.stage_groups(kern.spec)
    assert sorted(len(stages) for stages, _ in groups) == [1, 1, 2, 3]
    assert sorted(len(outputs) for _, outputs in groups) == [1, 1, 1, 1]
    with launch_params("reduction", XBLOCK=4, RBLOCK=16, looped=True), \
            lb.runtime.dump.dump(tmp_path / "dump"):
        got = graph(lb.tensor(x, device=dev), lb.tensor(y, device=dev))
        lb.graph.sync()
    for g, r in zip(got, graph(lb.tensor(x, device="numpy"), lb.tensor(y, device="numpy"))):
        compare(g.numpy(), r.numpy(), rtol=1e-4)
    (source,) = [f.read_text() for f in (tmp_path / "dump").glob("*.py")]
    assert "if tl.program_id(1) == 3:" in source and "== 4:" not in source
    assert tr.render(kern.spec, "k").grid == (2, 4)  # the GPU's default: 8-column tiles
    compile_for_sm90(kern.spec, "k", {})
    persistent = {"XBLOCK": 16, "RBLOCK": 128, "looped": False}  # one walk over r for all
    assert tr.render(kern.spec, "k", persistent).grid == (1,)


def test_an_output_that_needs_no_result_of_the_last_stage_is_stored_by_its_walk(dev, tmp_path):
    """A looped reduction walks each row once per stage (a max and the sum of exp(x - max)
    after it once for both), then once more for its per-element outputs; an output that
    needs no result of the last stage (a variance's x - mean, stored for its backward) is
    stored by the last stage's walk instead: two walks, not three. A softmax's output and
    a stored exp(x - max) need the pair's results, so they keep a walk of their own: two."""
    rng = np.random.default_rng(24)
    x = rand(rng, (6, 70))
    x[2, 5] = np.nan
    x[4, :] = -np.inf

    def centered(x):
        d = x - x.mean(axis=1, keepdims=True)
        return d, (d * d).sum(axis=1)

    def stored_exp(x):
        e = lb.exp(x - x.max(axis=1, keepdims=True))
        return e, e.sum(axis=1)

    def softmax(x):
        return (lb.softmax(x * 0.5, axis=1),)

    walks = []
    for j, graph in enumerate((centered, stored_exp, softmax)):
        with launch_params("reduction", XBLOCK=2, RBLOCK=16, looped=True), \
                lb.runtime.dump.dump(tmp_path / str(j)):
            got = graph(lb.tensor(x, device=dev))
            lb.graph.sync()
        with np.errstate(all="ignore"):
            for g, r in zip(got, graph(lb.tensor(x, device="numpy"))):
                compare(g.numpy(), r.numpy(), rtol=1e-4)
        (source,) = [f.read_text() for f in (tmp_path / str(j)).glob("*.py")]
        # the kernel's own walks (an online walk's second one, for rows of infinite or NaN
        # max, is nested in a test)
        walks.append(source.count("\n    for r0 in range"))
    assert walks == [2, 2, 2]
    for graph in (centered, stored_exp):
        (kern,) = lb.explain(*graph(lb.tensor(x, device="numpy"))).kernels
        compile_for_sm90(kern.spec, "k", {"XBLOCK": 2, "RBLOCK": 16, "looped": True})


# matmul ---------------------------------------------------------------------------------------
def test_matmul_f32_ragged_with_epilogue(dev):
    rng = np.random.default_rng(12)
    a, b, bias = rand(rng, (37, 19)), rand(rng, (19, 23)), rand(rng, (23,))
    check(dev, lambda a, b, c: lb.relu(a @ b + c), a, b, bias, rtol=1e-4, atol=1e-4)
    assert lb.explain(lb.tensor(a, device=dev) @ lb.tensor(b, device=dev)).kinds() == \
        ["matmul"]


@pytest.mark.parametrize("params", [{}, {"library": True}], ids=["triton", "library"])
def test_matmul_f16_batched_gelu(dev, params):
    rng = np.random.default_rng(13)
    m = 41 if params else 40  # a shape of its own: plans are cached
    a, b, bias = rand(rng, (2, m, 48), "float16"), rand(rng, (48, 56), "float16"), \
        rand(rng, (56,), "float16")
    with launch_params("matmul", **params):
        check(dev, lambda a, b, c: (lb.gelu(a @ b + c), lb.exp(a * 0.1) @ b), a, b, bias,
              rtol=2e-2, atol=2e-2)


def test_matmul_prologue_and_ints(dev):
    rng = np.random.default_rng(14)
    a, b = rand(rng, (24, 20)), rand(rng, (24, 18))
    check(dev, lambda a, b: (a.T * 2.0) @ lb.exp(b * 0.1), a, b, rtol=1e-4, atol=1e-4)
    ia, ib = rng.integers(-5, 5, (9, 17)).astype(np.int32), \
        rng.integers(-5, 5, (17, 11)).astype(np.int32)
    check(dev, lambda a, b: a @ b + 1, ia, ib)


@pytest.mark.parametrize("form", ["transposed", "heads"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_library_matmul_stores_an_operand_transposed_where_its_reads_run_along_rows(dev,
                                                                                      dtype,
                                                                                      form):
    """On the library path, a prologue whose loads step along the operand's rows (``g.mT``,
    a weight gradient's A; or the gradient of attention heads merged back into features,
    ``h * d + j`` along the rows) stores the operand transposed, and the library reads it
    so; B's prologue reads along its columns and stores it row-major."""
    rng = np.random.default_rng(18 + 2 * (dtype == "float32") + (form == "heads"))
    g = rand(rng, (60, 26) if form == "transposed" else (2, 4, 30, 8), dtype)
    x = rand(rng, (60, 34), dtype)

    def graph(g, x):
        if form == "heads":  # (batch, heads, tokens, d) -> (batch * tokens, heads * d)
            g = g.permute(0, 2, 1, 3).reshape(60, 32)
        return (g * 2.0).mT @ (x * 3.0 + 1.0)

    with launch_params("matmul", library=True):
        tol = 1e-4 if dtype == "float32" else 3e-2
        check(dev, graph, g, x, rtol=tol, atol=tol)
    plan = next(reversed(runtime.backend(dev).plans._plans.values()))  # the one just run
    (k,) = plan.kernels
    library = getattr(k.compiled, "kernel", k.compiled)
    assert library.parts.transposed == {"a": True, "b": False}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_half_product_stored_in_its_own_type_is_written_by_the_library(dev, dtype):
    """On the library path, a 16-bit product whose epilogue only stores it in its own type
    has no epilogue kernel: the library rounds the product to the operands' type, as the
    epilogue would, and writes the output itself. Widened to float32 on write, or with a
    bias added, the product goes through the epilogue kernel. NumPy's values each time."""
    rng = np.random.default_rng(44 + (dtype == "bfloat16"))
    a, b, c = rand(rng, (29, 40), dtype), rand(rng, (40, 52), dtype), rand(rng, (52,), dtype)
    forms = {"own type": lambda a, b, c: a @ b,
             "widened": lambda a, b, c: (a @ b).astype("float32"),
             "bias": lambda a, b, c: a @ b + c}
    backend = runtime.backend(dev)
    for form, graph in forms.items():
        with launch_params("matmul", library=True):
            check(dev, graph, a, b, c, rtol=3e-2, atol=3e-2)
        plan = next(reversed(backend.plans._plans.values()))  # the one just run
        (k,) = [k for k in plan.kernels if k.kind == "matmul"]
        library = getattr(k.compiled, "kernel", k.compiled)
        assert library.writes_output == (form == "own type"), form
        assert ("epilogue" in library.kernels) == (form != "own type"), form


@pytest.mark.parametrize("form", ["epilogue", "writes_output", "transposed_prologue"])
def test_the_library_over_padded_operands_computes_the_product(dev, form):
    """The padded library candidate (``pad_to``: K and N rounded up to 16 bytes, operands'
    rows starting at multiples of 16 bytes, zeros in what the padding adds) gives NumPy's
    values, with an epilogue reading the N columns of the padded product's rows, with the
    library writing the output (N already aligned), and with A stored transposed by its
    prologue in a batch; explain names the padding."""
    from lazyburn.runtime.cuda_library import LibraryMatmul

    dtype = "bfloat16" if form == "transposed_prologue" else "float32"
    shapes = {"epilogue": ((29, 37), (37, 51), (51,)),
              "writes_output": ((26, 37), (37, 48), (48,)),
              "transposed_prologue": ((2, 40, 27), (40, 50), (50,))}[form]
    graph = {"epilogue": lambda a, b, c: lb.tanh(a @ b) + c,
             "writes_output": lambda a, b, c: a @ b,
             "transposed_prologue": lambda a, b, c: (a * 2.0).mT @ (b + 1.0)}[form]
    rng = np.random.default_rng(61 + len(form))
    arrays = [rand(rng, shape, dtype) for shape in shapes]
    with launch_params("matmul", library=True, pad_to=16):
        tol = 1e-4 if dtype == "float32" else 3e-2
        check(dev, graph, *arrays, rtol=tol, atol=tol)
        lazy = [lb.tensor(x, device=dev) for x in arrays]
        engines = [e.engine for e in lb.explain(graph(*lazy)).executions]
    plan = next(reversed(runtime.backend(dev).plans._plans.values()))  # the one just run
    (pk,) = [pk for pk in plan.kernels if pk.kind == "matmul"]
    library = getattr(pk.compiled, "kernel", pk.compiled)
    assert isinstance(library, LibraryMatmul)
    parts = library.parts
    align = 16 // np.dtype(arrays[0].dtype).itemsize
    k_size, n_size = parts.extents
    assert k_size % align == 0 and n_size % align == 0 and parts.padded
    assert (k_size, n_size) == {"epilogue": (40, 52), "writes_output": (40, 48),
                                "transposed_prologue": (40, 56)}[form]
    assert library.writes_output == (form == "writes_output")
    assert parts.transposed["a"] == (form == "transposed_prologue")
    for name in ("a", "b"):  # every operand here is stored by a kernel, its rows aligned
        assert parts.layout[name][-1] % align == 0
    assert sum(f"rows padded to multiples of {align} elements" in e for e in engines) == 1, \
        engines


@pytest.mark.parametrize("form", ["epilogue", "writes_output", "transposed_prologue"])
def test_library_matmul_relaunched_through_its_one_call_launcher(dev, monkeypatch, form):
    """After its first run, a plan launches a library product through one call
    (``LibraryMatmul.fast``) that makes its views and launches its prologues and epilogue
    through their compiled launchers: NumPy's values at every run, for new data and a new
    scalar (a kernel argument). Under Triton's interpreter, which compiles no launcher, each
    part kernel gets one that runs it through the interpreter."""
    from lazyburn.runtime.cuda import TritonKernel
    from lazyburn.runtime.cuda_library import LibraryMatmul

    if runtime.backend(dev).interpret:
        base_call = TritonKernel.__call__

        def interpreted(self, backend, args):
            fast, self.fast = self.fast, None  # (the original call would launch through it)
            try:
                base_call(self, backend, args)
            finally:
                self.fast = fast

        def call_and_stand_in_a_launcher(self, backend, args):
            interpreted(self, backend, args)
            if self.fast is None and not self.empty:
                self.fast = lambda *a, stream=None: interpreted(self, backend, list(a))
        monkeypatch.setattr(TritonKernel, "__call__", call_and_stand_in_a_launcher)
    calls = []
    first_path = LibraryMatmul.__call__
    monkeypatch.setattr(LibraryMatmul, "__call__",
                        lambda self, backend, args: (calls.append(self),
                                                     first_path(self, backend, args)))

    def graph(a, b, c, s):
        if form == "epilogue":  # a batch: torch.bmm, then the epilogue kernel
            return lb.tanh(a @ b) * s + c
        if form == "writes_output":  # both operands direct: the library writes the output
            return a[0] @ b
        return (a[0] * s).mT @ (b * 3.0 + 1.0)  # A's prologue stores it transposed

    m = 26 + ["epilogue", "writes_output", "transposed_prologue"].index(form)
    shapes = ((2, m, 40), (40, 50), (50,)) if form != "transposed_prologue" else \
        ((2, 40, m), (40, 50), (50,))
    with launch_params("matmul", library=True):
        for run in range(4):
            rng = np.random.default_rng(900 + run)
            arrays = [rand(rng, shape) for shape in shapes]
            s = float(rng.uniform(0.5, 2.0))
            check(dev, lambda a, b, c: graph(a, b, c, s), *arrays, rtol=1e-4, atol=1e-4)
    (library,) = calls  # the first run's; the later ones went through its launcher
    assert library.fast is not None
    assert library.writes_output == (form != "epilogue")
    assert library.parts.transposed["a"] == (form == "transposed_prologue")


MATMUL_VARIANTS = [
    {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 2},
    {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 16, "EPILOGUE_SUBTILES": 4},
    {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 2, "PROGRAMS": 3,
     "EPILOGUE_SUBTILES": 2},
    # A (batch, m, 40) float32 loads through a tensor descriptor; B's rows (200 bytes) and
    # the scaled A cannot
    {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 16, "PROGRAMS": 3, "EPILOGUE_SUBTILES": 2,
     "TMA": True},
    {"library": True},
    {"library": True, "pad_to": 16},  # N = 50 multiplied as 52, the product's rows padded
]


def matmul_variant_graph(a, b, c):
    return lb.tanh(a @ b) + c, (a * 0.5) @ b


def matmul_variant_inputs(params):
    rng = np.random.default_rng(15)
    m = 31 + MATMUL_VARIANTS.index(params)  # a shape of its own: plans are cached
    return rand(rng, (2, m, 40)), rand(rng, (40, 50)), rand(rng, (50,))


@pytest.mark.parametrize("params", MATMUL_VARIANTS, ids=launch_id)
def test_matmul_launch_variants(dev, params):
    with launch_params("matmul", **params):
        check(dev, matmul_variant_graph, *matmul_variant_inputs(params), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("programs", [0, 3])
def test_matmul_tensor_descriptors(dev, programs):
    """Operands stored row-major, transposed, batched or shared by the batch load through
    tensor descriptors (zero-filled past ragged edges); the others through pointers."""
    rng = np.random.default_rng(16 + programs)
    m = 40 if programs else 48  # a shape of its own: plans are cached
    a = rand(rng, (2, 72, m), "float16")  # used transposed: (2, m, 72)
    b = rand(rng, (72, 40), "float16")  # shared by the batch
    bt = rand(rng, (2, 40, 72), "float16")  # used transposed: (2, 72, 40)
    bias = rand(rng, (40,), "float16")

    def graph(a, b, bt, c):
        at = a.permute(0, 2, 1)
        return lb.gelu(at @ b + c), at @ bt.permute(0, 2, 1)

    params = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "PROGRAMS": programs, "TMA": True}
    with launch_params("matmul", **params):
        check(dev, graph, a, b, bt, bias, rtol=2e-2, atol=2e-2)
    outs = graph(*[lb.tensor(x, device="numpy") for x in (a, b, bt, bias)])
    for k in lb.explain(*outs).kernels:
        assert set(tr.tma_operands(k.spec)) == {"a", "b"}
        source = tr.render(k.spec, "k", params).source
        assert source.count("tl.make_tensor_descriptor(") == 2
        assert "a_tile = tl.trans(tl.reshape(a_desc.load([pid_b, k0, pid_m * 32])" in source
    # rows of 20 float16 (40 bytes) break the copy engine's 16-byte stride rule
    spec = lb.explain(lb.tensor(rand(rng, (8, 20), "float16"), device="numpy") @
                      lb.tensor(rand(rng, (20, 16), "float16"), device="numpy")).kernels[0].spec
    assert set(tr.tma_operands(spec)) == {"b"}


# runtime --------------------------------------------------------------------------------------
def test_plan_cache_replay_compiles_once(dev):
    rng = np.random.default_rng(16)
    backend = runtime.backend(dev)

    def f(x):
        return lb.softmax(x * 3.0, axis=0) + 1

    first = f(lb.tensor(rand(rng, (11, 7)), device=dev)).numpy()
    compiles, hits = backend.compiles, backend.plans.hits
    x2 = rand(rng, (11, 7))
    second = f(lb.tensor(x2, device=dev)).numpy()
    assert backend.compiles == compiles and backend.plans.hits == hits + 1
    compare(second, f(lb.tensor(x2, device="numpy")).numpy())
    assert not np.array_equal(first, second)


def test_dump_and_kernel_cache(dev, tmp_path):
    rng = np.random.default_rng(17)
    x = lb.tensor(rand(rng, (13, 3)), device=dev)
    with lb.runtime.dump.dump(tmp_path / "dump"):
        (lb.exp(x) * 7.0).numpy()
    files = list((tmp_path / "dump").glob("*.py"))
    assert len(files) == 1
    text = files[0].read_text()
    assert "# lazyburn kernel: elementwise" in text and "@triton.jit" in text
    cached = list((runtime.dump.kernel_cache_dir()).glob("lb_*.py"))
    assert any(text.split("\n\n", 1)[1].strip() in c.read_text() for c in cached)


def test_compile_error_names_kernel_and_line(dev, monkeypatch):
    rng = np.random.default_rng(18)
    monkeypatch.setitem(tr.TL_MATH, "exp2", "tl.no_such_function")
    x = lb.tensor(rand(rng, (3, 17)), device=dev)
    y = lb.exp2(x) + 1  # the line the error must name
    line = y.origin
    with pytest.raises(lb.KernelCompileError) as info:
        y.numpy()
    assert info.value.kernel_file and info.value.kernel_file.endswith(".py")
    assert line and os.path.basename(line) in str(info.value)
    monkeypatch.undo()
    compare((lb.exp(x) + 2).numpy(), np.exp(x.numpy()) + 2)


def test_devices_and_copies(dev):
    rng = np.random.default_rng(19)
    h = rand(rng, (4, 6))
    t = lb.tensor(h, device="numpy").to(dev) * 2
    back = t.to("numpy") + 1
    compare(back.numpy(), h * 2 + 1)
    if not torch.cuda.is_available():
        with pytest.raises(lb.DeviceError):
            lb.tensor(h, device="cuda:1").numpy()


# launch configurations -------------------------------------------------------------------------
def _graphs(device, rows=64):
    """Graphs of every group kind and many ops, on ``device``."""
    rng = np.random.default_rng(20)
    x = lb.tensor(rand(rng, (rows, 300)), device=device)
    a = lb.tensor(rand(rng, (2, 64, 96), "float16"), device=device)
    b = lb.tensor(rand(rng, (96, 80), "float16"), device=device)
    w = lb.tensor(rand(rng, (300, 40)), device=device)
    i = lb.tensor(rng.integers(-3, 3, (16, 24)).astype(np.int8), device=device)
    return [lb.tanh(lb.expm1(x)) + lb.log1p(lb.abs(x)) + lb.round(x) + lb.pow(x, x) +
            lb.tan(x) + lb.floor_divide(x, 0.7) + lb.remainder(x, 1.3) + lb.pow(x, 3.0) +
            lb.minimum(0.5, x) + lb.sqrt(lb.abs(x)),
            lb.softmax(x, axis=-1), x.argmax(axis=0), lb.layer_norm(x, (300,)),
            lb.gelu(a @ b + 1.0), x @ w, i @ i.T,
            lb.default_rng(1).uniform((5, 7), device=device) + 1]


def _specs():
    specs = []
    for g in _graphs("numpy"):
        specs += [k.spec for k in lb.explain(g).kernels]
    return specs


def test_candidates_are_valid():
    from lazyburn import autotune as at
    from lazyburn.runtime.cuda_tuning import candidates

    persistent = float32 = half = 0
    for spec in _specs():
        cands = candidates(spec, sm_count=1, tma=True)
        assert at.admitted(cands, 2)[0].name == "default"
        assert len({c.name for c in cands}) == len(cands)
        for c in cands:
            if not c.params.get("library"):
                tr.render(spec, "k", dict(c.params))
        if spec.kind == "matmul" and spec.acc_dtype.is_float:
            assert any(c.params.get("library") and c.priority <= 1 for c in cands)
            # float32 products (CUDA-core IEEE products in Triton) try the library first (these
            # are too small for it to be the default)
            assert (cands[1].name == "library") == (spec.a.dtype.name == "float32"), spec
            assert not cands[0].params.get("library")
            float32 += spec.a.dtype.name == "float32"
            half += spec.a.dtype.name in ("float16", "bfloat16")
            persistent += sum(bool(c.params.get("PROGRAMS")) for c in cands)
        assert candidates(spec, interpret=True)[0].params == tr.default_params(spec, True)
    assert persistent and float32 and half


@pytest.mark.parametrize("m, k, n", [(256, 256, 256), (1, 2048, 1000), (16, 256, 256),
                                     (17, 256, 256), (384, 4096, 384), (4096, 384, 384)])
def test_large_float32_and_long_half_matmuls_run_on_the_library_by_default(m, k, n):
    """From LIBRARY_DEFAULT_WORK multiply-adds a float32 matmul's default (what runs untuned)
    is the library, and from FEW_ROWS_LIBRARY_WORK for FEW_ROWS rows or fewer (a classifier at
    batch 1); the generated default tile is still a candidate. float16 keeps its tile but
    where it gives fewer than FEW_TILES tiles over a K of LONG_K or more and at least the
    longer side (a weight's gradient over the tokens of a batch: the library splits K)."""
    from lazyburn import autotune as at
    from lazyburn.codegen.triton_matmul import FEW_TILES
    from lazyburn.runtime.cuda_tuning import (FEW_ROWS, FEW_ROWS_LIBRARY_WORK,
                                              LIBRARY_DEFAULT_WORK, LONG_K, candidates)

    work = m * k * n
    on_library = work >= LIBRARY_DEFAULT_WORK or m <= FEW_ROWS and work >= FEW_ROWS_LIBRARY_WORK
    assert on_library == ((m, k, n) != (17, 256, 256))
    split_k = k >= max(m, n, LONG_K) and work >= LIBRARY_DEFAULT_WORK and -(-m // 128) * \
        -(-n // 128) < FEW_TILES
    assert split_k == ((m, k, n) == (384, 4096, 384))
    for dtype, library in (("float32", on_library), ("float16", split_k)):
        x = lb.zeros((m, k), dtype=dtype, device="numpy")
        w = lb.zeros((k, n), dtype=dtype, device="numpy")
        (kern,) = lb.explain(lb.gelu(x @ w + 1.0)).kernels
        cands = candidates(kern.spec, sm_count=1, tma=True)
        assert len({c.name for c in cands}) == len(cands)
        assert len({repr(sorted(c.params.items())) for c in cands}) == len(cands)
        default = at.admitted(cands, 0)
        assert [c.name for c in default] == ["default"]
        assert bool(default[0].params.get("library")) == library
        generated = tr.default_params(kern.spec)
        assert any(c.params == generated for c in cands)
        assert sum(bool(c.params.get("library")) for c in cands) == 1


@pytest.mark.parametrize("vocab", [1003, 1008])
def test_half_products_with_rows_off_16_byte_boundaries_run_on_the_library_by_default(vocab):
    """A bfloat16 product whose operand or output rows start off 16-byte boundaries (a
    vocabulary of odd size: the logits' rows, a weight gradient reading the logits' gradient
    transposed) runs on the library over padded operands by default, from
    LIBRARY_DEFAULT_WORK multiply-adds, and the library unpadded and the generated default
    tile are candidates; with rows of 1008 elements (2016 bytes) the same products keep their
    generated tiles, and a product below that work keeps them either way."""
    from lazyburn import autotune as at
    from lazyburn.codegen.triton_matmul import unaligned_rows
    from lazyburn.runtime.cuda_tuning import LIBRARY_DEFAULT_WORK, candidates, pads_by_default

    rng = np.random.default_rng(31)

    def bf16(*shape):
        return lb.asarray(rng.standard_normal(shape).astype(np.float32), device="numpy"
                          ).astype("bfloat16")

    x, w, g = bf16(256, 384), bf16(vocab, 384), bf16(256, vocab)
    small = bf16(16, 384)
    for y, big in ((x @ w.mT, True), (g.mT @ x, True), ((g.mT @ x) * 0.5 + 1.0, True),
                   (g @ w, True), (small @ w.mT, False)):
        (kern,) = lb.explain(y).kernels
        spec = kern.spec
        assert (spec.batch * spec.m * spec.n * spec.k >= LIBRARY_DEFAULT_WORK) == big
        assert unaligned_rows(spec) == (vocab % 8 != 0)
        on_library = big and vocab % 8 != 0
        assert pads_by_default(spec) == on_library
        cands = candidates(kern.spec, sm_count=132, tma=True)
        (default,) = at.admitted(cands, 0)
        assert bool(default.params.get("library")) == on_library, y
        assert default.params.get("pad_to") == (16 if on_library else None)
        # the library unpadded is one of the autotuner's candidates, and so is the generated
        # default tile where the library is the default
        library = [c for c in cands[1:] if c.params.get("library")]
        assert [c.params.get("pad_to") for c in library] == [None]
        generated = [c.priority for c in cands if c.params == tr.default_params(spec, False)]
        assert generated == ([1] if on_library else [0])


def test_a_reduction_reading_a_value_per_row_or_per_column_keeps_its_layout():
    """The launch heuristics tell a sum down columns (a bias's gradient: wide row tiles over
    the contiguous axis) from a sum along rows by the first load that moves along both the
    reduced axis and the rows; a cross-entropy's gradient first reads each row's label, which
    does not move along the row, and taken for a column sum its 30 522-wide rows ran in 32 x
    32 tiles on a few programs; the bias gradient's sum down that gradient's columns first
    reads the label of each row it sums, the same for every column, and taken for a sum
    along rows each of its programs read one column."""
    rng = np.random.default_rng(7)
    logits = lb.asarray(rng.standard_normal((64, 3000)).astype(np.float32), device="numpy",
                        requires_grad=True)
    bias = lb.asarray(rng.standard_normal(3000).astype(np.float32), device="numpy",
                      requires_grad=True)
    labels = lb.asarray(rng.integers(0, 3000, 64), device="numpy")
    (grad,) = lb.autograd.grad(lb.cross_entropy(logits, labels), [logits])
    specs = [k.spec for k in lb.explain(grad).kernels if k.kind == "reduction"]
    assert specs
    for spec in specs:
        assert not tr.outer_reduction(spec)
        assert tr.default_params(spec)["XBLOCK"] == 1  # rows of 3000: one row a program
    (column_sum,) = lb.explain(logits.detach().sum(axis=0)).kernels
    assert tr.outer_reduction(column_sum.spec)
    # the bias's gradient, recomputed from the stored exp down each column: the row's label
    # is the first load along the rows it sums
    loss = lb.cross_entropy(logits.detach() + bias, labels)
    (bias_grad,) = lb.autograd.grad(loss, [bias])
    plan = lb.explain(loss, bias_grad)
    (sums,) = [k for k in plan.kernels if k.kind == "reduction" and
               [o.shape for o in k.ops if o.role == "anchor"] == [(1, 3000)]]
    assert tr.outer_reduction(sums.spec), str(plan)
    assert tr.default_params(sums.spec)["RBLOCK"] == 64  # 64 rows a step, in wide row tiles


def test_a_column_sum_computing_a_transcendental_takes_narrow_row_tiles():
    """A sum down columns whose summed value computes an ``exp`` per element (a softmax's
    column sums, recomputed: a bias gradient under autocast) is compute-bound and takes 8
    columns a program; a plain column sum keeps 64, for coalescing."""
    rng = np.random.default_rng(8)
    x = lb.asarray(rng.standard_normal((4096, 3000)).astype(np.float32), device="numpy")
    m = lb.asarray(rng.standard_normal((4096, 1)).astype(np.float32), device="numpy")
    (plain,) = lb.explain(x.sum(axis=0)).kernels
    (dear,) = lb.explain(lb.exp(x - m).sum(axis=0)).kernels
    assert tr.outer_reduction(plain.spec) and tr.outer_reduction(dear.spec)
    assert not tr_reduction.computes_transcendentals(plain.spec)
    assert tr_reduction.computes_transcendentals(dear.spec)
    assert (tr.default_params(plain.spec)["XBLOCK"], tr.default_params(dear.spec)["XBLOCK"]) \
        == (64, 8)


def test_a_pooling_window_is_walked_an_element_at_a_time(dev):
    """A window that would pad its tile's lanes and whose loads move by one or two elements
    from row to row (3 x 3 and 5 x 5 pooling, stride 1 or 2; a sum over a middle axis of 9) is
    walked one element at a time over 256 rows a program; a 2 x 2 window (its tile full) and
    rows of 9 consecutive elements (loads 9 apart) keep the persistent tile. Values as
    NumPy's, with those parameters: nan, infinities, integers, padding, ceil_mode and
    count_include_pad."""
    rng = np.random.default_rng(12)
    x = rand(rng, (2, 3, 13, 11))
    x[0, 0, 2, 3], x[0, 1, 5, 5], x[1, 2, 0, 0], x[1, 0, 7, 1] = np.nan, np.inf, -np.inf, -0.0
    xi = rng.integers(-2 ** 31, 2 ** 31 - 1, (2, 3, 13, 11), dtype=np.int64).astype(np.int32)
    windows = {
        "max 3 s1 p1": lambda t: lb.max_pool2d(t, 3, 1, 1),
        "max 3 s2 p1": lambda t: lb.max_pool2d(t, 3, 2, 1),
        "max 5 s1 p2 ceil": lambda t: lb.max_pool2d(t, 5, 2, 2, ceil_mode=True),
        "avg 3 s1 p1": lambda t: lb.avg_pool2d(t, 3, 1, 1),
        "avg 3 s2 excluding padding": lambda t: lb.avg_pool2d(t, 3, 2, 1, ceil_mode=True,
                                                              count_include_pad=False),
        "sum over a middle axis of 9": lambda t: t.reshape(2, 3, 13, 11)[:, :, :9].sum(axis=2),
    }
    tiled = {"max 2 s2": lambda t: lb.max_pool2d(t, 2, 2),
             "rows of 9": lambda t: t.reshape(-1)[:9 * 42].reshape(42, 9).sum(axis=1)}
    t = lb.tensor(x, device="numpy")
    for name, fn in {**windows, **tiled}.items():
        (k,) = [k for k in lb.explain(fn(t)).kernels if k.kind == "reduction"]
        assert tr.window_reduction(k.spec) == (name in windows), name
        params = tr.default_params(k.spec)
        assert (params == {"XBLOCK": 256, "RBLOCK": 1, "looped": True, "num_warps": 4}) == \
            (name in windows), (name, params)
    with launch_params("reduction", XBLOCK=256, RBLOCK=1, looped=True, num_warps=4):
        for name, fn in windows.items():
            check(dev, fn, x, rtol=1e-6)
            if name.startswith("max"):
                check(dev, fn, xi)


def special_rows(rng, n: int) -> np.ndarray:
    """Rows of ``n`` float32 values that a running max meets differently: random ones, a max
    that grows at every step of a walk (and one that never does), -inf in places and
    everywhere, +inf, NaN, -inf but for the last element, values near float32's largest
    (their differences overflow), -inf with +inf, and a constant row."""
    x = np.stack([rng.standard_normal(n) * 4 for _ in range(11)]).astype(np.float32)
    x[1] = np.linspace(-50, 50, n)
    x[2] = np.linspace(50, -50, n)
    x[3, rng.choice(n, n // 10, replace=False)] = -np.inf
    x[4] = -np.inf
    x[5, n // 3] = np.inf
    x[6, n // 2] = np.nan
    x[7] = -np.inf
    x[7, -1] = 5.0
    x[8] = rng.uniform(-3e38, 3e38, n)
    x[9, :3] = [np.inf, -np.inf, np.inf]
    x[10] = 7.0
    return x


def test_a_max_and_its_sum_of_exp_walk_a_row_once(dev):
    """A looped reduction's max and the sum of exp(x - max) after it walk each row once, with
    a running max (``online_pairs``): log-sum-exp, softmax, log-softmax and a cross-entropy as
    NumPy's, on rows whose max grows at every step, +-inf, NaN, values whose differences
    overflow, in float32 and float64, tiles of two rows of which one may be finite and the
    other not, a prologue on the max's value."""
    rng = np.random.default_rng(29)
    # steps of 64: 5 a lane, plain sums; of 8: 38, compensated sums (PLAIN_ONLINE_STEPS); each
    # its own row length, so its own plans
    for step, n in ((64, 300), (8, 296)):
        x = special_rows(rng, n)
        y = rng.standard_normal((1, n)).astype(np.float32)
        target = rng.integers(0, n, x.shape[0])
        fns = {"logsumexp": lambda t, y: lb.logsumexp(t, axis=-1),
               "softmax": lambda t, y: lb.softmax(t, axis=-1),
               "log_softmax": lambda t, y: lb.log_softmax(t, axis=-1),
               "sum of exp": lambda t, y: lb.exp(t - t.max(axis=-1, keepdims=True)).sum(axis=-1),
               "cross_entropy": lambda t, y: lb.cross_entropy(
                   t, lb.tensor(target, device=t.device), reduction="none"),
               "prologue": lambda t, y: lb.logsumexp(t * 0.5 + y, axis=-1)}
        t = lb.tensor(x, device="numpy")
        for name, fn in fns.items():
            (k,) = [k for k in lb.explain(fn(t, lb.tensor(y, device="numpy"))).kernels
                    if k.kind == "reduction" and k.spec.reduce_size == n]
            assert tr_reduction.online_pairs(k.spec) == {0: 1}, name
            assert not rereads_rows(k.spec) or name in ("softmax", "log_softmax"), name
        with launch_params("reduction", XBLOCK=2, RBLOCK=step, looped=True, num_warps=4):
            for name, fn in fns.items():
                with np.errstate(all="ignore"):
                    check(dev, fn, x, y, rtol=1e-5)
                    check(dev, fn, x.astype(np.float64), y.astype(np.float64), rtol=1e-12)


@pytest.mark.slow  # (a minute or two in the interpreter)
def test_random_programs_with_every_reduction_looped(dev, monkeypatch):
    """Random programs of ``tests/fuzz_graphs.py`` (every op, reductions fused on read and
    on write, views, matmul, pooling) with every reduction kernel looped in steps of 4
    elements over tiles of 2 rows, so that softmaxes and log-sum-exps walk their max and sum
    of exp together (``online_pairs``), against NumPy within the error bounds the programs
    carry."""
    import fuzz_graphs

    walks = []
    online = tr_reduction._online_walk

    def counted(*args, **kwargs):
        walks.append(1)
        return online(*args, **kwargs)
    monkeypatch.setattr(tr_reduction, "_online_walk", counted)
    runtime.backend(dev).plans.clear()
    with launch_params("reduction", XBLOCK=2, RBLOCK=4, looped=True, num_warps=4):
        # (values of at most 2**16 elements: larger ones take minutes in the interpreter)
        failures = fuzz_graphs.failing_programs(range(1_012_000, 1_012_060), dev, 1 << 16)
    runtime.backend(dev).plans.clear()
    assert not failures, "\n".join(failures)
    assert len(walks) >= 5, len(walks)  # (the programs did walk such pairs)


def test_a_vocabulary_wide_cross_entropy_walks_its_rows_once(dev, monkeypatch):
    """Rows of 30 522 (a vocabulary): the cross-entropy's max and sum of exp walk each row once
    (``online_pairs``), in the looped tile a GPU takes; its gradient, one walk over the row,
    stays looped; a softmax, which reads the row again for its output, holds its rows in
    registers (32 warps, 32 elements a thread). Values as NumPy's, in those tiles (the
    interpreter's own are smaller)."""
    rng = np.random.default_rng(11)
    vocab = 30522
    x = rng.standard_normal((3, vocab)).astype(np.float32) * 4
    logits = lb.tensor(x, device=dev, requires_grad=True)
    loss = lb.cross_entropy(logits, lb.tensor(np.array([5, -100, vocab - 1]), device=dev))
    (grad,) = lb.autograd.grad(loss, [logits])
    plan = lb.explain(loss, grad)
    long = [k for k in plan.kernels if k.kind == "reduction" and k.spec.reduce_size == vocab]
    assert [rereads_rows(k.spec) for k in long] == [False, False], str(plan)
    forward, backward = long
    assert tr_reduction.online_pairs(forward.spec) == {0: 1}
    assert tr.default_params(forward.spec) == {"XBLOCK": 1, "RBLOCK": 2048, "looped": True,
                                               "num_warps": 4}
    assert tr.default_params(backward.spec)["looped"]
    (softmax,) = lb.explain(lb.softmax(logits.detach(), axis=-1)).kernels
    assert not tr.default_params(softmax.spec)["looped"]
    (sums,) = lb.explain(logits.detach().sum(axis=-1)).kernels  # one walk: looped
    assert tr.default_params(sums.spec)["looped"]

    # the values, computed with a GPU's parameters (on 2 rows: a plan of its own)
    x = rng.standard_normal((2, vocab)).astype(np.float32) * 4
    target = np.array([vocab - 1, -100])
    shifted = x.astype(np.float64) - x.max(axis=1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    kept = target != -100
    want_grad = np.exp(log_p)
    want_grad[kept, target[kept]] -= 1
    want_grad *= kept[:, None] / kept.sum()
    want_loss = np.float32(-log_p[kept, target[kept]].mean())
    base = tr.default_params
    monkeypatch.setattr(tr, "default_params", lambda spec, interpret=False: base(
        spec, interpret and not (spec.kind == "reduction" and spec.reduce_size == vocab)))
    logits = lb.tensor(x, device=dev, requires_grad=True)
    loss = lb.cross_entropy(logits, lb.tensor(target, device=dev))
    (grad,) = lb.autograd.grad(loss, [logits])
    compare(loss.numpy(), np.array(want_loss), rtol=1e-5)
    compare(grad.numpy(), want_grad.astype(np.float32), rtol=1e-4, atol=1e-9)


# (kind, graph, shape of x, tolerance): graphs of every group kind whose tuning candidates run
# under the interpreter: an element-wise chain, row and column reductions, float16 and float32
# matmuls with prologue and epilogue (the float16 one does not read x)
CANDIDATE_GRAPHS = [
    ("elementwise", lambda x, w, a, b: lb.tanh(x * 1.5) + lb.sin(x), (40, 300), 2e-5),
    ("reduction", lambda x, w, a, b: lb.softmax(x, axis=-1), (7, 300), 1e-4),
    ("reduction", lambda x, w, a, b: x.sum(axis=0), (100, 42), 1e-4),
    ("matmul", lambda x, w, a, b: lb.gelu(a @ b + 1.0), (8, 8), 2e-2),
    ("matmul", lambda x, w, a, b: lb.tanh((x * 0.5) @ w), (43, 300), 1e-4),
]


def candidate_inputs(rng, shape):
    return (rand(rng, shape), rand(rng, (shape[-1], 40)) * 0.1, rand(rng, (2, 64, 96), "float16"),
            rand(rng, (96, 80), "float16") * 0.1)


@pytest.mark.parametrize("kind,graph,shape,tol", CANDIDATE_GRAPHS,
                         ids=[f"{c[0]}{i}" for i, c in enumerate(CANDIDATE_GRAPHS)])
def test_every_tuning_candidate_computes_the_reference(dev, kind, graph, shape, tol):
    """A GPU's autotuner picks among these launches: each one (its warp and stage counts
    aside, which the interpreter ignores) gives the reference's values here."""
    rng = np.random.default_rng(24)
    inputs = candidate_inputs(rng, shape)
    (spec,) = [k.spec for k in lb.explain(*_as_tuple(graph(
        *[lb.tensor(a, device="numpy") for a in inputs]))).kernels if k.spec.kind == kind]
    seen, tried = set(), 0
    backend = runtime.backend(dev)
    for c in cuda_tuning.candidates(spec, sm_count=2, tma=True):
        launch = {k: v for k, v in c.params.items() if k not in ("num_warps", "num_stages")}
        if repr(sorted(launch.items())) in seen:
            continue
        seen.add(repr(sorted(launch.items())))
        backend.plans.clear()  # plan again, under this candidate's parameters
        compiles = backend.compiles
        with launch_params(kind, **c.params):
            check(dev, graph, *inputs, rtol=tol, atol=tol)
        assert backend.compiles > compiles or c.params.get("library"), c  # a kernel of its own
        tried += 1
    backend.plans.clear()
    assert tried >= 3


def _as_tuple(out):
    return out if isinstance(out, tuple) else (out,)


POINTER = {"bool": "*i1", "int8": "*i8", "int16": "*i16", "int32": "*i32", "int64": "*i64",
           "uint8": "*u8", "uint16": "*u16", "uint32": "*u32", "uint64": "*u64",
           "float16": "*fp16", "bfloat16": "*bf16", "float32": "*fp32", "float64": "*fp64"}


def compile_for_sm90(spec, name: str, params: dict) -> None:
    """Compile the CUDA spelling of ``spec`` with launch ``params`` to a cubin for sm_90 (no
    GPU needed; Triton's interpreter checks much less than its compiler: loop-carried types,
    for one). Skips the test when this Triton cannot target NVIDIA GPUs."""
    try:
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
        import triton.backends.nvidia  # noqa: F401
    except ImportError:
        pytest.skip("this Triton build has no NVIDIA backend")
    from lazyburn.runtime.cuda import load_kernel

    r = tr.render(spec, name, params, target="cuda")
    fn, _ = load_kernel(r.source, r.name, interpret=False)
    sig = {a.name: POINTER[a.dtype.name] for a in spec.args}
    sig.update({s.name: "i32" for s in spec.scalars})  # int32 bit patterns (cuda_replay)
    sig.update({arg: "i32" for arg, _ in r.extents})
    try:
        triton.compile(ASTSource(fn, sig), target=GPUTarget("cuda", 90, 32),
                       options={"num_warps": r.num_warps, "num_stages": r.num_stages})
    except Exception as e:  # pragma: no cover - the message is the point
        if "ptxas" in str(e) and "not found" in str(e):
            pytest.skip(f"no ptxas: {e}")
        raise AssertionError(f"kernel {name} ({spec.kind}, {params}) failed to compile:\n"
                             f"{r.source}") from e


def test_compiles_for_sm90():
    """The CUDA spelling (libdevice, tl.dot, NaN-aware reductions...) passes Triton's compiler
    down to a cubin for sm_90."""
    specs = _specs()
    specs.append(specs[1])  # softmax again, looped
    for j, spec in enumerate(specs):
        params = {"looped": True, "RBLOCK": 128} if j == len(specs) - 1 else {}
        compile_for_sm90(spec, f"k{j}", params)


def test_ten_batch_sizes_share_every_kernel(dev, rng, monkeypatch):
    """A layer norm, a softmax, a GELU of a bias add, a product with a weight (its rows the
    batch's) and one by a weight (its columns the batch's) over (batch, length, 64), and a
    convolution (a product per image) at ten batch sizes: the kernels take their element and
    row counts (a product's rows, columns and tiles of them) as arguments and are named after
    their source, so the kernel modules of the first size serve the other nine (every size
    here has the same launch parameters and ragged last blocks: the interpreter's larger
    tiles need fewer rows than a GPU's). Values against NumPy and PyTorch."""
    from lazyburn.runtime import cuda

    loaded = []
    real = cuda.load_kernel

    def load_kernel(source, name, interpret):
        loaded[-1].add(name)
        return real(source, name, interpret)

    monkeypatch.setattr(cuda, "load_kernel", load_kernel)
    w, bias = (rng.standard_normal(64).astype(np.float32) for _ in range(2))
    # (a product's columns few enough that at every size here it stays below the work from
    # which a GPU's default is the library's product, cuda_tuning.LIBRARY_DEFAULT_WORK)
    m = rng.standard_normal((64, 24)).astype(np.float32)
    W, B, Mat = (lb.tensor(a, device=dev) for a in (w, bias, m))
    kernel = (rng.standard_normal((8, 4, 3, 3)) / 6).astype(np.float32)
    Kernel = lb.tensor(kernel, device=dev)
    batches, length = (range(10, 20), 7) if runtime.backend(dev).interpret else \
        (range(17, 27), 257)
    for batch in batches:
        x = rng.standard_normal((batch, length, 64)).astype(np.float32)
        X = lb.tensor(x, device=dev)
        loaded.append(set())
        got = row_ops(X, W, B)
        lin = (X @ Mat).numpy()
        cols = (Mat.mT @ X.reshape(-1, 64).mT).numpy()
        image = rng.standard_normal((batch, 4, 9, 9)).astype(np.float32)
        conv = lb.conv2d(lb.tensor(image, device=dev), Kernel, padding=1).numpy()
        np.testing.assert_allclose(lin, x @ m, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(cols, m.T @ x.reshape(-1, 64).T, rtol=1e-4, atol=1e-4)
        want = torch.nn.functional.conv2d(torch.from_numpy(image), torch.from_numpy(kernel),
                                          padding=1).numpy()
        np.testing.assert_allclose(conv, want, rtol=1e-4, atol=1e-5)
        check_row_ops(got, x, w, bias)
    assert len(loaded[0]) >= 6 and all(names == loaded[0] for names in loaded[1:]), loaded


def test_the_gpu_compiler_runs_llvm_at_the_chosen_level(monkeypatch, tmp_path):
    """A kernel compiled for the GPU goes through LLVM's optimizer at ``LLVM_OPT_LEVEL`` (at
    Triton's own level 3, LLVM miscompiled a convolution's padding mask on an H200), says so
    in its source (which keys Triton's cache), and the compiler is Triton's own again after."""
    from triton._C.libtriton import llvm

    from lazyburn.runtime.cuda import llvm_opt_level

    seen = []
    real = llvm.optimize_module

    def recording(module, level, *args, **kwargs):
        seen.append(level)
        return real(module, level, *args, **kwargs)

    monkeypatch.setattr(llvm, "optimize_module", recording)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))  # compiled here, not found
    spec = _specs()[0]
    assert f"# compiled with LLVM -O{tr.LLVM_OPT_LEVEL}" in tr.render(spec, "k", {}).source
    assert "compiled with LLVM" not in tr.render(spec, "k", {}, "interpret").source
    with llvm_opt_level(tr.LLVM_OPT_LEVEL):
        compile_for_sm90(spec, "k_level", {})
    assert seen and all(level is getattr(llvm, f"OPTIMIZE_O{tr.LLVM_OPT_LEVEL}")
                        for level in seen)
    assert llvm.optimize_module is recording
    # (the same source: named after it, its binary would be found in the first directory)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "default"))
    compile_for_sm90(spec, "k_default", {})
    assert seen[-1] is llvm.OPTIMIZE_O3


@pytest.mark.skipif(not torch.cuda.is_available(), reason="LLVM's miscompile needs the GPU "
                    "compiler (the interpreter runs the kernels in NumPy)")
def test_a_padded_strided_convolution_of_a_batch_matches_torch(dev):
    """ResNet's 7x7, stride-2, padding-3 stem on 8 images: its window operand written out for
    the library matmul (an im2col gather whose mask LLVM's level-3 optimizer broke on an
    H200: 1.4 % of the padding read as pixels) matches PyTorch's convolution."""
    rng = np.random.default_rng(31)
    x = rng.standard_normal((8, 3, 224, 224), np.float32)
    w = (rng.standard_normal((64, 3, 7, 7)) / 12).astype(np.float32)
    before = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        want = torch.nn.functional.conv2d(torch.from_numpy(x).cuda(), torch.from_numpy(w).cuda(),
                                          stride=2, padding=3).cpu().numpy()
    finally:
        torch.backends.cudnn.allow_tf32 = before
    got = lb.conv2d(lb.asarray(x, device=dev), lb.asarray(w, device=dev), stride=2, padding=3)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need the GPU (the "
                    "interpreter captures none)")
def test_a_cuda_graph_reads_weights_in_place_and_copies_the_inputs(dev, monkeypatch):
    """With ``cuda_graphs`` set, a replayed plan (two kernels) is captured at its second run
    and replayed as one graph launch from the third: fresh inputs are copied in, a weight that
    stayed the same buffer is read in place (updated in place through PyTorch, the replay sees
    it), and a weight that is another buffer drops the graph."""
    from lazyburn.runtime import cuda as lb_cuda

    monkeypatch.setattr(lb_cuda, "cuda_graphs", True)
    backend = runtime.backend(dev)
    gen = torch.Generator(device="cuda").manual_seed(5)
    w_t = torch.randn(64, 48, device="cuda", generator=gen)
    w = lb.from_torch(w_t)
    f = lb.jit(lambda x, w: lb.softmax(lb.relu(x @ w) * 0.5 + 1.0, axis=0), device=dev)

    def step(weight, weight_t):
        """Whether the call replayed a graph (the kernels it ran are counted either way)."""
        x_t = torch.randn(16, 64, device="cuda", generator=gen)
        before = backend.graphs_replayed, backend.kernels_launched
        got = f(lb.from_torch(x_t), weight).numpy()
        want = torch.softmax(torch.relu(x_t @ weight_t) * 0.5 + 1.0, dim=0).cpu().numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        assert backend.kernels_launched > before[1]
        return backend.graphs_replayed - before[0]

    assert step(w, w_t) == 0 and step(w, w_t) == 0  # compiled, then captured
    assert step(w, w_t) == 1 and step(w, w_t) == 1  # the graph: one launch, fresh inputs
    w_t.mul_(-2.0)  # the same buffer, new values
    assert step(w, w_t) == 1
    w2_t = torch.randn(64, 48, device="cuda", generator=gen)
    assert step(lb.from_torch(w2_t), w2_t) == 0  # another weight buffer: the kernels again


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need the GPU (the "
                    "interpreter captures none)")
def test_a_plan_whose_graph_would_copy_more_than_it_saves_is_launched(dev, monkeypatch):
    """A plan of one kernel (a max pooling) and a plan of two kernels with a 64 MB result
    (two softmaxes) are launched kernel by kernel at every run, never captured: a graph would
    save the host one launch and copy the whole result out on the device. A plan of two
    kernels with a small result (a corner of a softmax) is captured at its second run and
    replayed at its third and fourth."""
    from lazyburn.runtime import cuda as lb_cuda

    monkeypatch.setattr(lb_cuda, "cuda_graphs", True)
    backend = runtime.backend(dev)
    gen = torch.Generator(device="cuda").manual_seed(7)
    x_t = torch.randn(2, 8, 1024, 1024, device="cuda", generator=gen)
    x = lb.from_torch(x_t)
    plans = {
        "one kernel": (lambda: lb.max_pool2d(x, 3, 1, 1),
                       lambda: torch.nn.functional.max_pool2d(x_t, 3, 1, 1)),
        "a large result": (lambda: lb.softmax(lb.softmax(x, axis=0), axis=-1),
                           lambda: torch.softmax(torch.softmax(x_t, dim=0), dim=-1)),
        "a small result": (lambda: lb.softmax(x, axis=0)[:, :, :4, :4],
                           lambda: torch.softmax(x_t, dim=0)[:, :, :4, :4]),
    }
    replayed = {}
    for name, (plan, reference) in plans.items():
        before = backend.graphs_replayed
        for _ in range(4):
            got = lb.to_torch(plan())
            torch.testing.assert_close(got, reference(), rtol=1e-5, atol=1e-6)
        replayed[name] = backend.graphs_replayed - before
    assert replayed == {"one kernel": 0, "a large result": 0, "a small result": 2}, replayed


def test_a_graph_is_worth_capturing_for_many_launches_and_small_copies():
    """``worth_capturing``: never for one kernel; for more, when the copies' device time is
    below the launches' host time saved (MiniLM's forward: 70 kernels, a 3 MB result)."""
    from lazyburn.runtime.cuda_replay import worth_capturing

    assert not worth_capturing(1, 0)
    assert not worth_capturing(2, 16_777_216)  # max_pool2d's output beside one more launch
    assert worth_capturing(2, 4096)
    assert worth_capturing(70, 32 * 128 * 384 * 2)
    assert not worth_capturing(70, 1 << 30)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need the GPU (the "
                    "interpreter captures none)")
def test_a_cuda_graph_is_not_replayed_with_other_scalar_values(dev, monkeypatch):
    """A graph replays the scalar arguments it was captured with: a recorded plan whose
    Python scalars (a learning rate over Adam's bias correction) and dropout seed change at
    every run is captured once, dropped when its scalars change and not captured again, and
    each run computes with its own values, bit for bit as the NumPy device."""
    from lazyburn.runtime import cuda as lb_cuda

    monkeypatch.setattr(lb_cuda, "cuda_graphs", True)
    backend = runtime.backend(dev)
    rng = np.random.default_rng()
    p, g = rng.standard_normal((2, 999)).astype(np.float32)

    def update(device, step):
        gen = lb.default_rng(int(rng.integers(1 << 62)))
        gen.offset = step * 999
        lr = 1e-2 * 0.5 ** step
        new = lb.asarray(p, device=device) - lr / (1 - 0.9 ** step) * lb.asarray(g, device=device)
        return lb.dropout(new, 0.25, training=True, generator=gen)

    replayed, outputs = [], []
    for step in range(1, 7):
        state = rng.bit_generator.state
        before = backend.graphs_replayed
        got = update(dev, step).numpy()
        replayed.append(backend.graphs_replayed - before)
        rng.bit_generator.state = state  # the same seed for the NumPy device
        np.testing.assert_array_equal(got, update("numpy", step).numpy(), err_msg=f"{step}")
        outputs.append(got)
    assert replayed == [0] * 6, replayed
    assert len({o.tobytes() for o in outputs}) == len(outputs)


def test_cuda_graphs_are_bounded_in_number_and_memory(dev, monkeypatch):
    """At most ``MAX_CUDA_GRAPHS`` captured plans and ``CUDA_GRAPH_MEMORY_FRACTION`` of the
    device's memory: the least recently replayed graph is dropped first, and a plan whose
    graph alone holds more is not captured again."""
    from lazyburn.runtime import cuda as lb_cuda

    class Captured:  # what the backend asks of a Program
        def __init__(self):
            self.graph, self.last_leaves, self.capturable = "graph", {}, True

    backend = runtime.backend(dev)
    monkeypatch.setattr(lb_cuda, "MAX_CUDA_GRAPHS", 2)
    monkeypatch.setattr(lb_cuda, "CUDA_GRAPH_MEMORY_FRACTION", 0.5)
    monkeypatch.setattr(backend, "max_alloc", 1000)
    monkeypatch.setattr(backend, "_graphs", type(backend._graphs)())

    def captured(nbytes):
        program = Captured()
        backend.hold_graph(program, nbytes)
        return program

    a, b = captured(100), captured(100)
    backend.replayed_graph(a)  # b is now the least recently replayed
    c = captured(100)  # a third: b goes
    assert list(backend._graphs) == [a, c] and b.graph is None and b.capturable
    d = captured(350)  # 550 bytes with a and c: a goes, and 450 stay
    assert list(backend._graphs) == [c, d] and a.graph is None and c.graph == "graph"
    e = captured(600)  # alone past 500: dropped, with everything older, and not captured again
    assert e.graph is None and not e.capturable and e not in backend._graphs
    assert d.graph is None and c.graph is None and not backend._graphs


def test_the_graphs_compiled_for_sm90_compute_the_reference(dev):
    """What test_compiles_for_sm90 compiles, run here (on the interpreter without a GPU, so
    on fewer rows) and compared with the NumPy reference, the looped softmax included."""
    for got, want in zip(_graphs(dev, rows=8), _graphs("numpy", rows=8)):
        compare(got.numpy(), want.numpy(), rtol=2e-2 if want.dtype == lb.float16 else 1e-4,
                atol=2e-2 if want.dtype == lb.float16 else 1e-5)
    rng = np.random.default_rng(25)
    with launch_params("reduction", looped=True, RBLOCK=128):
        check(dev, lambda x: lb.softmax(x, axis=-1), rand(rng, (6, 300)), rtol=1e-4)


@pytest.mark.parametrize("kind,params", [("reduction", p) for p in REDUCTION_TILINGS] +
                         [("matmul", p) for p in MATMUL_VARIANTS],
                         ids=lambda v: launch_id(v) if isinstance(v, dict) else v)
def test_tilings_compile_for_sm90(kind, params):
    """Every launch variant the interpreter tests force also compiles for the GPU."""
    from lazyburn.fusion.library import split_matmul
    from lazyburn.runtime.cuda_library import library_align

    if kind == "reduction":
        graph, inputs = reduction_tiling_graph, reduction_tiling_inputs(params)
    else:
        graph, inputs = matmul_variant_graph, matmul_variant_inputs(params)
    outs = graph(*[lb.tensor(a, device="numpy") for a in inputs])
    kernels = lb.explain(*outs).kernels
    assert {k.spec.kind for k in kernels} >= {kind}
    for j, k in enumerate(kernels):
        if k.spec.kind != kind:
            compile_for_sm90(k.spec, f"k{j}", {})
        elif params.get("library"):  # the element-wise parts around torch.mm
            align = library_align(k.spec, params)
            for part_name, part in split_matmul(k.spec, True, True, align).kernels.items():
                compile_for_sm90(part, f"k{j}_{part_name}", {})
        else:
            compile_for_sm90(k.spec, f"k{j}", params)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_float32_operand_rounded_to_half_is_converted_once_into_its_tile(dev, dtype):
    """A float32 value cast to float16 or bfloat16 and multiplied (autocast's cast of an
    activation or a master weight) is one conversion of the loaded tile, without the
    rounding that keeps a NaN's sign (a product with a NaN term has no set sign): NumPy's
    values, nan and inf among the operands, and in the GPU source one conversion per operand
    in the K loop."""
    rng = np.random.default_rng(71 + (dtype == "bfloat16"))
    a, b = rand(rng, (33, 48)), rand(rng, (48, 40))
    a[3, 5], a[7, 2], b[9, 11] = np.nan, np.inf, -np.nan

    def graph(a, b):
        return (a.astype(dtype) @ b.astype(dtype)).astype("float32")

    check(dev, graph, a, b, rtol=3e-2, atol=3e-2)
    (k,) = lb.explain(graph(lb.tensor(a, device="numpy"), lb.tensor(b, device="numpy"))
                      ).kernels
    source = tr.render(k.spec, "k", tr.default_params(k.spec)).source
    loop = source[source.index("for k0"):source.index("acc = tl.dot")]
    assert "lb_keep_nan" not in loop and loop.count(f".to(tl.{dtype})") == 2, loop
    compile_for_sm90(k.spec, "k", tr.default_params(k.spec))


def test_tf32_is_opt_in():
    rng = np.random.default_rng(21)
    a = lb.tensor(rand(rng, (32, 32)), device="numpy")
    (k,) = lb.explain(a @ a).kernels
    assert 'input_precision="ieee"' in tr.render(k.spec, "k").source
    assert 'input_precision="tf32"' in tr.render(k.spec, "k", {"allow_tf32": True}).source


def test_half_matmul_accumulates_in_float32():
    """float16 operands go to tl.dot as they are, the accumulator is float32, and the epilogue
    (bias, gelu) runs in slices of the tile, rounded to float16 after each operation, as NumPy
    rounds it."""
    rng = np.random.default_rng(23)
    # (enough 128 x 256 tiles for the GPU's default: fewer would take 128 x 128 ones)
    a = lb.tensor(rand(rng, (2048, 64), "float16"), device="numpy")
    b = lb.tensor(rand(rng, (64, 4096), "float16"), device="numpy")
    c = lb.tensor(rand(rng, (4096,), "float16"), device="numpy")
    (k,) = lb.explain(lb.gelu(a @ b + c)).kernels
    r = tr.render(k.spec, "k", {"BLOCK_M": 128, "BLOCK_N": 256, "num_warps": 8})
    assert r.params["EPILOGUE_SUBTILES"] == 4
    src = r.source
    assert "acc = tl.full((128, 256), 0, tl.float32)" in src
    assert "acc = tl.dot(a_tile, b_tile, acc)" in src and "a_tile = tl.broadcast_to(t" in src
    assert src.count("tl.erf(") == 4 and all(
        "lb_half_bits(" in line and line.rstrip().endswith(", False))")
        for line in src.splitlines()
        if "tl.store(" in line)
    assert src.count("tl.store(") == 4


def test_torch_interop_shares_memory(dev):
    from lazyburn.frontend.interop import from_torch, to_torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    t = torch.linspace(-2, 2, 30, device=device).reshape(5, 6)
    x = from_torch(t)
    assert x.device == dev and x.shape == (5, 6)
    y = to_torch(lb.softmax(x, axis=-1) * 2)
    assert y.shape == (5, 6)
    torch.testing.assert_close(y, torch.softmax(t, dim=-1) * 2)
    assert to_torch(x).data_ptr() == t.data_ptr()


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint8", "int16", "int32", "int64",
                                   "float16", "bfloat16", "float32", "float64"])
def test_candidate_outputs_are_compared_by_the_host_rule(dtype, monkeypatch):
    """A GPU compares a candidate's outputs with the default's where they are (torch tensors,
    here on the CPU), a chunk at a time: integers and bools bit for bit (an int32 near 2**31
    off by one is caught), floats within ``fused.tolerance`` with equal NaNs; the count and
    the first index are the host rule's."""
    monkeypatch.setattr(cuda_tuning, "COMPARE_CHUNK", 4096)  # several chunks
    d = dt.BY_NAME[dtype]
    n = 10_003
    e, a = outputs_off_in_a_few_places(d, n, 7_000, np.random.default_rng(26))
    scale = fused.output_scale(*fused.finite_abs_sum(e)) if d.is_float else 0.0
    want = int(fused.host_mismatches(e, a, d, scale).sum())
    assert want == (3 if d.is_float else 2)

    def as_torch(v):
        if dtype == "bfloat16":
            return torch.from_numpy(v.astype(np.float32)).to(torch.bfloat16)
        return torch.from_numpy(v)

    arg = KernelArg("out0", d, n, True)
    message = cuda_tuning.compare_outputs(torch, as_torch(e), as_torch(a), arg)
    first = 4 if d.is_float else 5
    assert message is not None and message.startswith(f"{want} of {n} output elements differ")
    assert f"first at element {first}:" in message, message
    assert cuda_tuning.compare_outputs(torch, as_torch(e), as_torch(e), arg) is None


def test_a_timing_keeps_the_device_busy_while_the_host_queues_each_run():
    """``cuda_tuning.device_ms`` queues, before each timed run, the L2 flush and a sleep of
    the device longer than the host takes to queue the run (so the events around the run
    time the device's work only), and makes at most MAX_TIMED_RUNS runs. A stand-in for
    torch's CUDA module records what is queued: its sleep spins 1000 cycles a millisecond,
    a run of ``fn`` takes the host 2 ms and its events 0.004 ms apart."""
    import time
    from types import SimpleNamespace

    queued = []

    class Event:
        def __init__(self, enable_timing=False):
            self.at = None

        def record(self):
            self.at = len(queued)
            queued.append("event")

        def elapsed_time(self, end):
            return 10 ** 4 if queued[self.at + 1].startswith("sleep") else 0.004

    cuda = SimpleNamespace(Event=Event, current_device=lambda: 0, synchronize=lambda: None,
                           _sleep=lambda cycles: queued.append(f"sleep {cycles}"))
    flush = SimpleNamespace(zero_=lambda: queued.append("flush"))
    fake = SimpleNamespace(cuda=cuda, int8="int8", empty=lambda *a, **kw: flush)

    def fn():
        time.sleep(0.002)
        queued.append("run")

    ms = cuda_tuning.device_ms(fake, fn, 1.0, 25.0)
    assert ms == 0.004
    timed = [i for i in range(len(queued) - 2) if queued[i:i + 3] == ["event", "run", "event"]]
    assert len(timed) == 5 + cuda_tuning.MAX_TIMED_RUNS  # the estimate's five, then the cap
    for i in timed:
        assert queued[i - 2] == "flush" and queued[i - 1].startswith("sleep")
        assert int(queued[i - 1].split()[1]) >= 1.5 * 2 * 1000  # cycles for 3 ms at least


def test_first_launch_tuning_runs_checks_and_caches(dev, monkeypatch):
    """The tuning path a GPU takes at autotune level >= 1, with the timer stubbed (the
    interpreter's timings mean nothing)."""
    from lazyburn import autotune as at

    real = cuda_tuning.candidates

    def with_alternative(spec, interpret=False, sm_count=None, tma=False):
        base = real(spec, interpret, sm_count, tma)
        if spec.kind != "elementwise":
            return base
        return base + [at.Candidate("BLOCK=64", {**base[0].params, "BLOCK": 64}, 1)]

    monkeypatch.setattr(cuda_tuning, "candidates", with_alternative)
    monkeypatch.setattr(cuda_tuning, "device_ms", lambda torch, fn, *timing: (fn(), 1.0)[1])
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: "interpreter")
    monkeypatch.setenv("LAZYBURN_AUTOTUNE", "1")
    monkeypatch.setenv("LAZYBURN_AUTOTUNE_PROCESS_BUDGET", "inf")  # (whatever the caller set)
    rng = np.random.default_rng(22)
    x = rand(rng, (9, 31))
    tunes, benchmarks = at.stats.tunes, at.stats.benchmarks
    check(dev, lambda x: lb.cos(x) * 3 - 1, x)
    assert at.stats.tunes == tunes + 1 and at.stats.benchmarks >= benchmarks + 2
    hits = at.stats.hits
    runtime.backend(dev).plans.clear()
    runtime.backend(dev)._programs.clear()
    check(dev, lambda x: lb.cos(x) * 3 - 1, x)  # compiled again: the tuning comes from cache
    assert at.stats.hits == hits + 1


@pytest.mark.parametrize("faster_whole", [False, True], ids=["default", "winner"])
def test_a_representatives_winner_is_timed_against_the_default_at_full_size(
        dev, monkeypatch, tmp_path, faster_whole):
    """A kernel tuned on a representative prefix runs the prefix's winner only if it is also
    faster than the default at the kernel's own size. The timer is stubbed: the other
    candidate takes half the default's time on the prefix and, whole, twice it or half it."""
    from lazyburn import autotune as at

    real = cuda_tuning.candidates

    def with_alternative(spec, interpret=False, sm_count=None, tma=False):
        base = real(spec, interpret, sm_count, tma)
        return base + [at.Candidate("BLOCK=64", {**base[0].params, "BLOCK": 64}, 1)]

    size = 30 * 1000
    last = []  # (candidate's BLOCK, the elements it was built for) of the last launch
    build = cuda_tuning.TunedKernel._build

    def building(self, c, spec=None):
        kernel = build(self, c, spec)

        def launch(backend, args):
            last[:] = [(c.params["BLOCK"], (spec or self.spec).numel)]
            kernel(backend, args)
        return launch

    def bench(torch, fn, *timing):  # ms
        fn()
        block, numel = last[0]
        if block != 64:
            return 1.0
        return 0.5 if numel < size or faster_whole else 2.0

    monkeypatch.setattr(cuda_tuning, "candidates", with_alternative)
    monkeypatch.setattr(cuda_tuning.TunedKernel, "_build", building)
    monkeypatch.setattr(cuda_tuning, "MAX_TUNED_WORK", {"elementwise": 1 << 12})
    monkeypatch.setattr(cuda_tuning, "device_ms", bench)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: "interpreter")
    monkeypatch.setenv("LAZYBURN_AUTOTUNE", "1")
    monkeypatch.setenv("LAZYBURN_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("LAZYBURN_AUTOTUNE_PROCESS_BUDGET", "inf")
    runtime.backend(dev).plans.clear()
    runtime.backend(dev)._programs.clear()
    a = np.random.default_rng(23).standard_normal((30, 1000)).astype(np.float32)
    tunes = at.stats.tunes
    got = (lb.exp(lb.asarray(a, device=dev)) * 2).numpy()
    np.testing.assert_allclose(got, np.exp(a) * 2, rtol=2e-6)
    entries = sorted(at.default_cache().entries(), key=lambda e: np.prod(e.key.shape))
    assert [e.winner for e in entries] == ["BLOCK=64", "BLOCK=64" if faster_whole else "default"]
    assert at.stats.tunes == tunes + 2  # the prefix's search, then the pair at full size
    block, numel = last[0]  # the real launch
    assert numel == size and (block == 64) == faster_whole


def test_a_half_product_of_few_tiles_takes_narrower_ones():
    """Half-precision products take 128 x 256 tiles by default, 128 x 128 where those would
    be fewer than a GPU has multiprocessors (a 4096 x 384 product over a vocabulary: 64 tiles
    of 128 x 256 left half an H200 idle, 1.35 ms against 0.74)."""
    rng = np.random.default_rng(3)

    def spec(m, k, n):
        a = lb.asarray(rng.standard_normal((m, k)).astype(np.float16), device="numpy")
        b = lb.asarray(rng.standard_normal((k, n)).astype(np.float16), device="numpy")
        (kern,) = lb.explain(a @ b).kernels
        return kern.spec

    few = tr.default_params(spec(2048, 64, 384))  # 16 x 2 tiles of 128 x 256
    assert (few["BLOCK_M"], few["BLOCK_N"]) == (128, 128)
    many = tr.default_params(spec(4096, 64, 4096))  # 32 x 16
    assert (many["BLOCK_M"], many["BLOCK_N"]) == (128, 256)
    single = tr.default_params(spec(64, 64, 48))
    assert single["BLOCK_N"] == 64  # a narrow product keeps its fitted tile


def test_a_half_product_storing_several_results_takes_narrower_tiles():
    """A half-precision product whose epilogue stores more than one result (a GELU beside its
    pre-activation) takes 128 x 128 tiles where one result alone takes 128 x 256: each stored
    value stays live beside the accumulator."""
    rng = np.random.default_rng(4)
    a = lb.asarray(rng.standard_normal((4096, 64)).astype(np.float16), device="numpy")
    b = lb.asarray(rng.standard_normal((64, 4096)).astype(np.float16), device="numpy")
    h = a @ b
    (one,) = lb.explain(lb.gelu(h)).kernels
    assert len(one.spec.outputs) == 1
    assert (tr.default_params(one.spec)["BLOCK_M"], tr.default_params(one.spec)["BLOCK_N"]) \
        == (128, 256)
    (two,) = lb.explain(h, lb.gelu(h)).kernels
    assert len(two.spec.outputs) == 2
    params = tr.default_params(two.spec)
    assert (params["BLOCK_M"], params["BLOCK_N"], params["num_warps"]) == (128, 128, 8)
    assert params["EPILOGUE_SUBTILES"] == 1  # 64 accumulator elements a thread fit whole
