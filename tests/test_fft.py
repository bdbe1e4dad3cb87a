"""The array API's ``fft`` extension (``lazyburn.fft``) against ``numpy.fft`` on fresh random
data, on the reference device and every fused device: each transform in float32, float64,
complex64 and complex128 (WGSL refuses the 64-bit ones), with every ``norm``, lengths that pad
and trim, axes; the frequencies and shifts; the plan (a library call named by ``explain``,
element-wise kernels around it); empty, long and non-finite inputs; the errors; ``jit``
replay; gradients refused where recorded."""
from __future__ import annotations

import numpy as np
import pytest

import lazyburn as lb

EPS = {"float32": 1e-6, "complex64": 1e-6, "float64": 1e-14, "complex128": 1e-14}


def holds(device, dtype) -> bool:
    return not (device.startswith("webgpu") and dtype in ("float64", "complex128"))


def signal(rng, shape, dtype):
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def close(got, want):
    """Within a few units of the dtype's precision times the transform's magnitude (an FFT's
    error grows with the log of its length, relative to the largest output)."""
    got = got.numpy()
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype,
                                                                 want.shape, want.dtype)
    eps = EPS[str(want.dtype)]
    scale = max(1.0, float(np.abs(want).max())) if want.size else 1.0
    np.testing.assert_allclose(got, want, rtol=0, atol=64 * eps * scale)


CASES = [  # (name, kwargs, input kind: "complex", "real" or "half" spectrum)
    ("fft", {}, "any"), ("fft", dict(n=5, axis=0, norm="ortho"), "any"),
    ("fft", dict(n=12, norm="forward"), "any"), ("ifft", dict(axis=1), "any"),
    ("fftn", {}, "any"), ("fftn", dict(s=(4, 6), axes=(1, 2), norm="ortho"), "any"),
    ("ifftn", dict(axes=(0, 2)), "any"), ("ifftn", dict(s=(3,), axes=(-1,), norm="forward"), "any"),
    ("rfft", {}, "real"), ("rfft", dict(n=7, axis=1, norm="ortho"), "real"),
    ("irfft", {}, "half"), ("irfft", dict(n=9, axis=0), "half"),
    ("rfftn", {}, "real"), ("rfftn", dict(s=(4, -1), axes=(0, 2)), "real"),
    ("irfftn", {}, "half"), ("irfftn", dict(s=(3, 6), axes=(0, 2), norm="forward"), "half"),
    ("hfft", {}, "half"), ("hfft", dict(n=6, norm="ortho"), "half"),
    ("ihfft", {}, "real"), ("ihfft", dict(n=5, axis=0), "real"),
]


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128"])
def test_each_transform_matches_numpy(device, dtype, rng):
    if not holds(device, dtype):
        with pytest.raises(lb.DTypeError):
            lb.fft.fft(lb.asarray(signal(rng, (4,), dtype), device=device)).numpy()
        return
    complex_input = np.dtype(dtype).kind == "c"
    for name, kwargs, kind in CASES:
        if kind == "real" and complex_input:
            with pytest.raises(lb.DTypeError, match="real input"):
                getattr(lb.fft, name)(lb.asarray(signal(rng, (3, 4, 8), dtype), device=device))
            continue
        x = signal(rng, (3, 4, 8), dtype)
        want = getattr(np.fft, name)(x, **kwargs)
        got = getattr(lb.fft, name)(lb.asarray(x, device=device), **kwargs)
        close(got, want)


def test_integer_input_is_transformed_in_the_default_float_precision(device, rng):
    x = rng.integers(-5, 6, (3, 8)).astype(np.int32)
    got = lb.fft.fft(lb.asarray(x, device=device))
    assert got.dtype == lb.complex64
    close(got, np.fft.fft(x.astype(np.float32)))


def test_frequencies_and_shifts(device, rng):
    for n in (1, 6, 7):
        for d in (1.0, 0.25):
            close(lb.fft.fftfreq(n, d=d, device=device), np.fft.fftfreq(n, d).astype(np.float32))
            close(lb.fft.rfftfreq(n, d=d, device=device),
                  np.fft.rfftfreq(n, d).astype(np.float32))
    if holds(device, "float64"):
        close(lb.fft.fftfreq(8, dtype="float64", device=device), np.fft.fftfreq(8))
    x = rng.standard_normal((4, 7, 5)).astype(np.float32)
    t = lb.asarray(x, device=device)
    for axes in (None, 1, (0, 2)):
        close(lb.fft.fftshift(t, axes=axes), np.fft.fftshift(x, axes=axes))
        close(lb.fft.ifftshift(t, axes=axes), np.fft.ifftshift(x, axes=axes))
    # the centered spectrum, shifted back, is the spectrum
    close(lb.fft.ifftshift(lb.fft.fftshift(lb.fft.fft(t))), np.fft.fft(x))


def test_a_transform_is_a_library_call_between_fused_kernels(fused, rng):
    x = rng.standard_normal((4, 16)).astype(np.float32)
    t = lb.asarray(x, device=fused)
    y = lb.fft.irfft(lb.fft.rfft(t * 2) * lb.fft.rfftfreq(16, device=fused)) + 1
    plan = lb.explain(y)
    assert plan.library_calls == 2
    engine = "torch.fft (cuFFT) on the device" if fused.startswith("cuda") else \
        "numpy.fft (pocketfft) on the host"
    text = str(plan)
    assert f"library(rfftn)  library: {engine}" in text
    assert f"library(irfftn)  library: {engine}" in text
    assert plan.kinds().count("library") == 2 and "elementwise" in plan.kinds()
    want = np.fft.irfft(np.fft.rfft(x * 2) * np.fft.rfftfreq(16).astype(np.float32)) + 1
    close(y, want.astype(np.float32))


def test_empty_long_and_non_finite_inputs(device, rng):
    empty = lb.zeros((0, 8), device=device)
    assert lb.fft.fft(empty).shape == (0, 8) and lb.fft.rfft(empty).numpy().shape == (0, 5)
    # an empty axis with a length: zeros padded to it, transformed
    close(lb.fft.fft(lb.zeros((3, 0), device=device), n=4), np.zeros((3, 4), np.complex64))
    with pytest.raises(lb.ShapeError, match="length"):
        lb.fft.fft(lb.zeros((3, 0), device=device))
    x = rng.standard_normal(1 << 16).astype(np.float32)
    close(lb.fft.rfft(lb.asarray(x, device=device)), np.fft.rfft(x))
    x = rng.standard_normal((3, 8)).astype(np.float32)
    x[1, 3] = np.nan
    got = lb.fft.fft(lb.asarray(x, device=device)).numpy()
    assert np.isnan(got[1]).all() and np.isfinite(got[[0, 2]]).all()


def test_bad_input_is_refused_where_it_is_recorded(device, rng):
    t = lb.asarray(rng.standard_normal((3, 8)).astype(np.float32), device=device)
    with pytest.raises(ValueError, match="norm"):
        lb.fft.fft(t, norm="none")
    with pytest.raises(lb.ShapeError, match=">= 1"):
        lb.fft.fft(t, n=0)
    with pytest.raises(lb.ShapeError):
        lb.fft.fft(t, axis=2)
    with pytest.raises(lb.ShapeError, match="lengths for"):
        lb.fft.fftn(t, s=(2, 3), axes=(0,))
    with pytest.raises(lb.ShapeError, match="need their axes"):
        lb.fft.fftn(t, s=(2, 3))
    with pytest.raises(lb.ShapeError, match="repeated"):
        lb.fft.fftn(t, axes=(0, 0))
    with pytest.raises(lb.ShapeError, match="0-d"):
        lb.fft.fft(t[0, 0])
    if not device.startswith("webgpu"):
        with pytest.raises(lb.DTypeError, match="float16"):
            lb.fft.fft(t.astype("float16"))
    with pytest.raises(lb.ShapeError, match="n must be"):
        lb.fft.fftfreq(0, device=device)


def test_jit_replays_transforms_on_fresh_data(fused, rng):
    f = lb.jit(lambda t: lb.fft.irfft(lb.fft.rfft(t) * 0.5, n=16) - t)
    for _ in range(3):
        x = rng.standard_normal((2, 16)).astype(np.float32)
        close(f(lb.asarray(x, device=fused)), (np.fft.irfft(np.fft.rfft(x) * 0.5, n=16) - x)
              .astype(np.float32))


def test_a_tensor_that_requires_grad_is_refused(rng):
    x = lb.tensor(rng.standard_normal(8).astype(np.float32), requires_grad=True)
    with pytest.raises(lb.AutogradError):
        lb.fft.rfft(x)
    with lb.no_grad():
        close(lb.fft.rfft(x), np.fft.rfft(x.detach().numpy()))


def test_namespace_is_the_array_api_extension():
    assert hasattr(lb.asarray([1.0]).__array_namespace__(), "fft")
    assert set(lb.fft.__all__) == {"fft", "ifft", "fftn", "ifftn", "rfft", "irfft", "rfftn",
                                   "irfftn", "hfft", "ihfft", "fftfreq", "rfftfreq",
                                   "fftshift", "ifftshift"}
