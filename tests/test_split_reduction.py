"""Split reductions (``fusion.split_reduction``): which reductions split, the two kernels'
specs, the Triton and OpenCL heuristics that split few long rows, and the values of split
kernels against NumPy on ``cuda:0`` (Triton's interpreter without a GPU), ``opencl:0`` and
``webgpu:0``, with the split forced where the heuristics would not split such small
shapes."""
from __future__ import annotations

import importlib
import sys

import numpy as np
import pytest

pytest.importorskip("triton")

from fused_devices import FUSED_DEVICES  # noqa: E402  (sets up Triton's interpreter)

import lazyburn as lb  # noqa: E402
from lazyburn import runtime  # noqa: E402
from lazyburn.codegen import triton as tr  # noqa: E402
from lazyburn.codegen import triton_reduction  # noqa: E402
from lazyburn.fusion import split_reduction  # noqa: E402
from lazyburn.runtime import cuda_tuning  # noqa: E402


def kernel_specs(*tensors):
    return [k.spec for k in lb.explain(*tensors).kernels if k.kind == "reduction"]


def test_what_splits():
    rng = np.random.default_rng(11)
    x = lb.asarray(rng.standard_normal((96, 40)).astype(np.float32), device="numpy")
    (column,) = kernel_specs(lb.exp(x).sum(axis=0) * 2.0)
    assert split_reduction.splittable(column)
    assert split_reduction.split(column, 7) is None  # 7 does not divide 96
    assert split_reduction.split(column, 1) is None
    partial, total = split_reduction.split(column, 4)
    assert (partial.rows, partial.reduce_size) == (160, 24)
    assert (total.rows, total.reduce_size) == (40, 4)
    # partial: the inputs, then one partial buffer per stage; total: the inputs, the partial
    # buffers, then the outputs, stored as the unsplit kernel stores them
    n_in = len(column.inputs)
    assert [a.is_output for a in partial.args] == [False] * n_in + [True]
    assert partial.args[-1].size == 160 and partial.args[-1].dtype.name == "float32"
    assert [a.is_output for a in total.args] == [False] * (n_in + 1) + [True]
    assert total.outputs[0].arg == n_in + 1
    # a softmax's sum reads its max: not split; neither is an argmax, nor a product
    for spec in kernel_specs(lb.softmax(x, axis=0)) + kernel_specs(lb.argmax(x, axis=0)) + \
            kernel_specs(x.prod(axis=0)):
        assert not split_reduction.splittable(spec)
        assert split_reduction.split(spec, 4) is None
    # a float16 mean's partial sums are float32
    h = lb.asarray(rng.standard_normal((64, 8)).astype(np.float16), device="numpy")
    (mean,) = kernel_specs(h.mean(axis=0))
    partial, total = split_reduction.split(mean, 8)
    assert partial.args[-1].dtype.name == "float32"
    assert total.stages[0].dtype is mean.stages[0].dtype  # (the stage's, as unsplit)
    assert total.outputs[0].value.dtype.name == "float16"


def test_the_heuristic_splits_few_long_rows():
    """A (4096, 384) column sum, a bias gradient's: 48 programs of 8 columns unsplit; split,
    its partial kernel runs at least ``SPLIT_PROGRAMS``. A (4096, 30 522) column sum and a
    short one are not split; a full sum of 2**22 is."""
    rng = np.random.default_rng(12)

    def params(shape, axis):
        x = lb.asarray(rng.standard_normal(shape).astype(np.float32), device="numpy")
        (spec,) = kernel_specs(x.sum(axis=axis))
        return spec, tr.default_params(spec)

    spec, p = params((4096, 384), 0)
    assert p["SPLIT"] > 1 and 4096 % p["SPLIT"] == 0
    partial = split_reduction.split(spec, p["SPLIT"])[0]
    assert -(-partial.rows // p["XBLOCK"]) >= triton_reduction.SPLIT_PROGRAMS[True]
    assert 4096 // p["SPLIT"] >= triton_reduction.SPLIT_MIN_CHUNK[True]
    assert "SPLIT" not in tr.unsplit_params(spec)
    assert "SPLIT" not in params((4096, 30522), 0)[1]
    assert "SPLIT" not in params((64, 384), 0)[1]  # too little work
    # eight column sums of one kernel: each keeps a sum and its error per tile element, so
    # the tile is narrower along the reduced axis (at most OUTER_REGISTERS a thread)
    x = lb.asarray(rng.standard_normal((4096, 384)).astype(np.float32), device="numpy")
    (spec,) = kernel_specs(*[(x * float(i)).sum(axis=0) for i in range(1, 9)])
    assert len(spec.stages) == 8
    for tile in (tr.default_params(spec), tr.unsplit_params(spec)):
        threads = 32 * tile["num_warps"]
        assert tile["XBLOCK"] * tile["RBLOCK"] // threads * 8 <= triton_reduction.OUTER_REGISTERS
    assert params((4096, 384), 0)[1]["RBLOCK"] == 64
    spec, p = params((1 << 22,), 0)
    assert p["SPLIT"] == 512 and p["XBLOCK"] == 1  # 512 programs of 8192
    # under Triton's interpreter nothing is split by default
    assert "SPLIT" not in tr.default_params(spec, interpret=True)
    # WebGPU: a workgroup a row, split in enough chunks for SPLIT_ROWS rows
    from lazyburn.runtime import webgpu_tuning
    assert webgpu_tuning.split_parts(spec, webgpu_tuning.reduction_params(spec)) == \
        webgpu_tuning.SPLIT_ROWS
    # the search tries half and twice as many chunks, then unsplit tiles (without SPLIT)
    cands = cuda_tuning.candidates(spec)
    splits = [c.params.get("SPLIT", 1) for c in cands]
    assert splits[0] == p["SPLIT"]
    assert {p["SPLIT"] // 2, p["SPLIT"] * 2} <= set(splits)
    assert splits.count(1) >= 2


@pytest.mark.skipif("opencl:0" not in FUSED_DEVICES, reason="no OpenCL device")
def test_opencl_splits_few_long_rows():
    """On OpenCL a reduction of few long rows runs a work-group a row (one core of a CPU for
    a sum of everything): split, its partial kernel has ``SPLIT_ROWS`` rows per compute
    unit. Its value, against NumPy's in float64."""
    from lazyburn.runtime import opencl_tuning

    backend = runtime.backend("opencl:0")
    rng = np.random.default_rng(16)
    x = rng.standard_normal(1 << 20).astype(np.float32)
    t = lb.asarray(x, device="opencl:0")
    (k,) = lb.explain(t.sum()).kernels
    p = opencl_tuning.default_params(backend, k)
    kind = "cpu" if backend.is_cpu else "gpu"
    assert p["SPLIT"] >= min(opencl_tuning.SPLIT_ROWS[kind] * backend.compute_units,
                             (1 << 20) // opencl_tuning.SPLIT_MIN_CHUNK)
    assert "SPLIT" not in opencl_tuning.reduction_params(backend, k.spec)
    assert "split reduction: a partial and a total kernel" in str(lb.explain(t.sum()))
    got = float(t.sum().numpy())
    assert abs(got - x.astype(np.float64).sum()) <= 1e-6 * np.abs(x).sum()
    # many rows: not split
    (k,) = lb.explain(lb.asarray(x.reshape(1024, 1024), device="opencl:0").sum(axis=1)).kernels
    assert "SPLIT" not in opencl_tuning.default_params(backend, k)


@pytest.fixture(scope="module", params=FUSED_DEVICES)
def dev(request, tmp_path_factory):
    """``cuda:0`` (Triton's interpreter without a GPU), ``opencl:0`` and ``webgpu:0``,
    every splittable reduction of ``MIN_SIZE`` or more elements a row split in ``PARTS``
    chunks where they divide it."""
    device = request.param
    had = device in runtime._backends
    backend = runtime.backend(device)
    if device.startswith("cuda"):
        module, heuristic = tr, tr.default_params

        def forced(spec, interpret=False):
            if spec.kind == "reduction" and spec.reduce_size >= MIN_SIZE:
                kernels = split_reduction.split(spec, PARTS)
                if kernels is not None:
                    return {**heuristic(kernels[0], interpret), "SPLIT": PARTS}
            return heuristic(spec, interpret)
    else:
        module = importlib.import_module(f"lazyburn.runtime.{device.partition(':')[0]}")
        tuning = importlib.import_module(f"{module.__name__}_tuning")
        heuristic = module.default_params

        def forced(backend, k):
            if k.kind == "reduction" and k.spec.reduce_size >= MIN_SIZE:
                kernels = split_reduction.split(k.spec, PARTS)
                if kernels is not None:
                    launch = tuning.reduction_params(backend, kernels[0]) \
                        if device.startswith("opencl") else tuning.reduction_params(kernels[0])
                    return {**launch, "SPLIT": PARTS}
            return heuristic(backend, k)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAZYBURN_CACHE_DIR", str(tmp_path_factory.mktemp("lazyburn-cache")))
        mp.setenv("LAZYBURN_AUTOTUNE", "0")
        mp.setattr(module, "default_params", forced)
        backend.plans.clear()  # (plans compiled elsewhere, unsplit)
        yield device
        backend.plans.clear()
    if not had:
        runtime._backends.pop(device, None)


PARTS, MIN_SIZE = 4, 16


def split_kernels(t) -> int:
    """How many of the kernels computing pending ``t`` on its device run split."""
    plan, _ = runtime.backend(t.device).prepare([t.node])
    return sum(type(getattr(k.compiled, "kernel", None) or k.compiled).__name__ ==
               "SplitReduction" for k in plan.kernels)


def special(rng, shape, dtype):
    """Fresh random values of ``dtype`` with its corner cases scattered in: for floats +-0,
    +-inf and nan; for integers the extremes."""
    x = rng.standard_normal(shape) * 8
    flat = x.reshape(-1)
    if np.dtype(dtype).kind == "f":
        x = x.astype(dtype)
        flat = x.reshape(-1)
        picks = rng.choice(flat.size, 6, replace=False)
        flat[picks] = [0.0, -0.0, np.inf, -np.inf, np.nan, -0.0]
        return x
    info = np.iinfo(dtype)
    x = x.astype(dtype)
    flat = x.reshape(-1)
    flat[rng.choice(flat.size, 2, replace=False)] = [info.min, info.max]
    return x


def check(got, want, rtol):
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                   rtol=rtol, atol=rtol, equal_nan=True)
        # the sign of a zero and where nan and inf are, exactly
        np.testing.assert_array_equal(np.signbit(got[got == 0]), np.signbit(want[want == 0]))


@pytest.mark.parametrize("op", ["sum", "max", "min", "prod", "mean"])
@pytest.mark.parametrize("axis", [0, 1, None])
def test_split_values_float(dev, op, axis):
    rng = np.random.default_rng(hash((op, axis)) % 2 ** 32)
    x = special(rng, (48, 64), np.float32)
    if op == "prod":  # values near one keep the product finite
        x = (1 + rng.standard_normal((48, 64)) / 64).astype(np.float32)
    got = getattr(lb.asarray(x, device=dev), op)(axis=axis)
    assert split_kernels(got) == (op != "prod")  # (a product never splits)
    check(got.numpy(), getattr(np, op)(x, axis=axis), 2e-5)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8])
def test_split_values_integer(dev, dtype):
    rng = np.random.default_rng(13)
    x = special(rng, (64, 40), dtype)
    t = lb.asarray(x, device=dev)
    for op in ("sum", "max", "min"):
        got = getattr(t, op)(axis=0)
        assert split_kernels(got) == 1
        check(got.numpy(), getattr(np, op)(x, axis=0), 0)


def test_split_values_bool_and_half(dev):
    rng = np.random.default_rng(14)
    b = rng.random((64, 24)) < 0.02
    t = lb.asarray(b, device=dev)
    for got, want in ((lb.any(t, axis=0), b.any(axis=0)), (lb.all(~t, axis=0), (~b).all(0)),
                      (lb.count_nonzero(t, axis=0), np.count_nonzero(b, axis=0))):
        assert split_kernels(got) == 1
        check(got.numpy(), want, 0)
    h = rng.standard_normal((128, 16)).astype(np.float16)
    got = lb.asarray(h, device=dev).sum(axis=0)
    assert split_kernels(got) == 1
    check(got.numpy(), h.sum(axis=0, dtype=np.float32).astype(np.float16), 1e-3)


def test_split_with_prologue_epilogue_and_stages(dev):
    """Producers fused on read, consumers on write (a bias gradient's update), and two
    independent sums of one kernel; a variance, whose second sum reads the mean, runs
    unsplit and stays right."""
    rng = np.random.default_rng(15)
    x = rng.standard_normal((64, 48)).astype(np.float32)
    w = rng.standard_normal(48).astype(np.float32)
    t, tw = lb.asarray(x, device=dev), lb.asarray(w, device=dev)
    update = tw - 0.1 * (lb.exp(t) * 2.0).sum(axis=0)
    assert split_kernels(update) == 1
    check(update.numpy(), w - 0.1 * (np.exp(x) * 2).sum(0), 2e-5)
    s1, s2 = t.sum(axis=0), (t * t).sum(axis=0)
    plan = lb.explain(s1, s2)
    assert len(plan.kernels) == 1
    lb.sync(s1, s2)
    check(s1.numpy(), x.sum(0), 2e-5)
    check(s2.numpy(), (x * x).sum(0), 2e-5)
    v = lb.var(t, axis=0)
    assert split_kernels(v) == 0
    check(v.numpy(), x.var(0), 2e-5)


@pytest.mark.slow  # (a minute a device: the values above are the quick tier's)
def test_random_programs_with_split_reductions(dev, monkeypatch):
    """Random programs of ``tests/fuzz_graphs.py`` (every op, reductions fused on read and
    on write, views, matmul, pooling) with every reduction that splits run split, against
    NumPy within the error bounds the programs carry. Rows of 4 or more are split in 2 here:
    few of these programs reduce longer rows whose outputs are all per row."""
    import fuzz_graphs

    kernels = importlib.import_module(f"lazyburn.runtime.{dev.partition(':')[0]}")
    monkeypatch.setattr(sys.modules[__name__], "PARTS", 2)
    monkeypatch.setattr(sys.modules[__name__], "MIN_SIZE", 4)
    runtime.backend(dev).plans.clear()
    made = []
    init = kernels.SplitReduction.__init__

    def counted(self, *args, **kwargs):
        made.append(1)
        init(self, *args, **kwargs)
    monkeypatch.setattr(kernels.SplitReduction, "__init__", counted)
    # (values of at most 2**16 elements: larger ones take minutes in the interpreter)
    failures = fuzz_graphs.failing_programs(range(1_010_000, 1_010_080), dev, 1 << 16)
    assert not failures, "\n".join(failures)
    assert len(made) >= 8, len(made)  # (split kernels made: the programs did reduce such rows)
