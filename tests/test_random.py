"""Random numbers: the same bits on every backend from the same seed (uniform, normal, integers,
dropout, draws fused into other kernels, float16/bfloat16/float64 results, stream offsets across
2**32), the Philox words checked against the Random123 known answers and an independent
Python implementation, the normal transform's accuracy against float64 Box-Muller, and the
statistics of a million draws."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest

import lazyburn as lb
from fused_devices import FUSED_DEVICES
from lazyburn.codegen import philox
from lazyburn.errors import DTypeError

MASK = 0xFFFFFFFF


def philox_words(counter: int, seed: int) -> tuple[int, ...]:
    """Philox4x32-10 of counter (lo, hi, 0, 0) and key (lo, hi) of ``seed``, on Python ints:
    Salmon et al., SC 2011, as Random123 writes it."""
    c = [counter & MASK, (counter >> 32) & MASK, 0, 0]
    k = [seed & MASK, (seed >> 32) & MASK]
    for r in range(10):
        if r:
            k = [(k[0] + 0x9E3779B9) & MASK, (k[1] + 0xBB67AE85) & MASK]
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k[0], p1 & MASK, (p0 >> 32) ^ c[3] ^ k[1], p0 & MASK]
    return tuple(c)


def box_muller_program() -> philox.Program:
    p = philox.Program("box_muller", ("w0", "w1"))
    p.result = philox.box_muller(p, p.param("w0"), p.param("w1"))
    return p


# the same bits everywhere ----------------------------------------------------------------------
def draws(device: str, x: np.ndarray) -> dict[str, lb.Tensor | None]:
    """Every kind of draw, recorded on ``device`` from fresh generators (None: the device
    refused the dtype). Each is a kernel of its own: few, for OpenCL's compile times."""
    out = {}
    out["uniform(7, 33)"] = lb.default_rng(11).uniform((7, 33), device=device)
    out["uniform(4099,)"] = lb.default_rng(11).uniform((4099,), -1.0, 3.0, device=device)
    out["normal(1,)"] = lb.default_rng(12).normal((1,), device=device)
    out["normal(3, 5, 7)"] = lb.default_rng(12).normal((3, 5, 7), 0.5, 2.0, device=device)
    g = lb.default_rng(-5)  # a negative seed is taken modulo 2**64
    for what, dtype in (("uniform", "float16"), ("normal", "bfloat16"), ("normal", "float64"),
                        ("uniform", "float64")):
        try:
            out[f"{what}[{dtype}]"] = getattr(g, what)((6, 35), 1.5, 4.0, dtype=dtype,
                                                       device=device)
        except DTypeError:
            out[f"{what}[{dtype}]"] = None
    out["integers"] = g.integers(-7, 1000, shape=(301,), device=device)
    # counters crossing 2**32 within one draw (the carry into the counter's high word), and a
    # seed with high bits
    g = lb.default_rng(2 ** 40 + 3)
    g.offset = 2 ** 32 - 1000
    out["normal across 2**32"] = g.normal((2000,), device=device)
    # dropout's mask and scaling, and draws read through views inside other kernels
    t = lb.tensor(x, device=device)
    out["dropout"] = lb.dropout(t, 0.3, training=True, generator=lb.default_rng(9))
    out["normal viewed"] = lb.default_rng(3).normal((26, 10), device=device).T[1:, ::2] * 2.0 + t
    u = lb.default_rng(4).uniform((13, 9), device=device)
    out["uniform masks"] = lb.where(u.T < 0.25, t, -t)
    return out


@pytest.mark.parametrize("device", FUSED_DEVICES)
def test_draws_are_bit_identical_to_the_reference(device):
    x = np.random.default_rng(0).standard_normal((9, 13)).astype(np.float32)
    want = {k: v.numpy() for k, v in draws("numpy", x).items()}
    got = draws(device, x)
    for label, t in got.items():
        if t is None:
            assert want[label].dtype == np.float64 and device.startswith("webgpu")
            continue  # WGSL has no float64
        a = t.numpy()
        assert a.dtype == want[label].dtype, label
        assert np.array_equal(a.view(np.uint8), want[label].view(np.uint8)), \
            f"{label} on {device}: {np.count_nonzero(a != want[label])} elements differ"
    # the dropout mask is a real mask, and the fused draws are not all equal
    assert 0.2 < (want["dropout"] == 0).mean() < 0.4
    assert len(np.unique(want["normal across 2**32"])) == 2000


@pytest.mark.parametrize("device", FUSED_DEVICES)
def test_a_draw_is_computed_inside_its_consumer(device):
    y = lb.default_rng(1).normal((64, 33), device=device) * 2.0 + 1.0
    plan = lb.explain(y)
    assert plan.kernel_count == 1, str(plan)
    want = lb.default_rng(1).normal((64, 33), device="numpy") * 2.0 + 1.0
    np.testing.assert_array_equal(y.numpy(), want.numpy())


# the words and the transforms --------------------------------------------------------------------
def test_philox_known_answers():
    """Random123's known-answer vectors for philox4x32_10 (kat_vectors)."""
    cases = [((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
             ((MASK,) * 4, (MASK, MASK), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
             ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
              (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1))]
    for counter, key, expected in cases:
        got = []
        for word in range(4):
            p = philox.Program("kat", ("c0", "c1", "c2", "c3", "k0", "k1"))
            words = philox.philox4x32_10(p, *(p.param(n) for n in p.params))
            p.result = p.bits_f32(words[word])
            bits = p.evaluate(**dict(zip(p.params, counter + key))).reshape(1)
            got.append(int(bits.view(np.uint32)[0]))
        assert tuple(got) == expected
    assert philox_words(0, 0) == cases[0][2]


def test_uniform_is_the_top_24_bits_of_philox_word_0():
    for seed, offset in [(0, 0), (123456789, 7), (2 ** 63 + 12345, 2 ** 32 - 3),
                         (-1, 2 ** 64 - 2)]:
        g = lb.default_rng(seed)
        g.offset = offset
        got = g.uniform((5,), device="numpy").numpy()
        want = [(philox_words((offset + i) % 2 ** 64, seed % 2 ** 64)[0] >> 8) * 2.0 ** -24
                for i in range(5)]
        np.testing.assert_array_equal(got, np.array(want, np.float32))


def test_normal_is_box_muller_within_two_ulps():
    """z against float64 sqrt(-2 ln u1) cos(2 pi t) on the same words: random words, and the
    edges (u1 = 1 and 2**-24, the ends and middle of each quadrant, a few ulps either side)."""
    rng = np.random.default_rng(1)
    edges = np.array([0, 1, 2, 255, 256, 2 ** 23 - 1, 2 ** 23, 2 ** 24 - 1], np.int64) << 8
    quarter = np.array([q * 2 ** 30 + m + d for q in range(4) for m in (0, 2 ** 29)
                        for d in (-2, -1, 0, 1, 2)]) % 2 ** 32
    w0 = np.concatenate([rng.integers(0, 2 ** 32, 1 << 16), np.repeat(edges, len(quarter))])
    w1 = np.concatenate([rng.integers(0, 2 ** 32, 1 << 16), np.tile(quarter, len(edges))])
    w0, w1 = w0.astype(np.uint32), w1.astype(np.uint32)
    z = box_muller_program().evaluate(w0=w0, w1=w1)
    u1 = 1.0 - (w0 >> 8).astype(np.float64) * 2.0 ** -24
    # cos(2 pi t) from t's distance r to the nearest quarter turn q (exact in float64), so that
    # the zeros of the cosine are zeros
    t = w1.astype(np.float64) / 2 ** 32
    q = np.round(4 * t)
    r = 2 * np.pi * (t - q / 4)
    cos = np.choose(q.astype(np.int64) % 4, [np.cos(r), -np.sin(r), -np.cos(r), np.sin(r)])
    want = np.sqrt(-2.0 * np.log(u1)) * cos
    ulp = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    err = np.abs(z.astype(np.float64) - want) / ulp
    assert err.max() <= 2.0, (err.argmax(), z[err.argmax()], want[err.argmax()])
    assert np.all(z[u1 == 1.0] == 0) and not np.signbit(z[u1 == 1.0]).any()
    assert np.abs(z).max() <= math.sqrt(-2 * math.log(2.0 ** -24))


def test_the_kernel_languages_print_one_program():
    """Each language's source calls what the program holds: the Philox multipliers, and in
    WGSL (no 64-bit integers) products of 16-bit halves; no float function, division or
    fused multiply-add of the device's."""
    for program in philox.PROGRAMS.values():
        n_mulhi = sum(v.op == "mulhi" for v in program.live())
        for language, spelling in (("opencl", "mul_hi("), ("wgsl", "lb_mulhi("),
                                   ("triton", "tl.umulhi(")):
            text = philox.source(program, language)
            assert text.count(spelling) == n_mulhi, language
            assert str(philox.PHILOX_M1) in text and program.name in text
            assert not re.search(r"\b(log|log2|exp|sin|cos|sqrt|rsqrt|fma|mad|pow)\(|/", text)
    assert "u64" not in philox.source(philox.NORMAL, "wgsl")


# statistics -------------------------------------------------------------------------------------
def test_a_million_draws_look_uniform_and_normal():
    scipy_stats = pytest.importorskip("scipy.stats")
    n = 1_000_000
    g = lb.default_rng(2024)
    u = g.uniform((n,), device="numpy").numpy().astype(np.float64)
    z = g.normal((n,), device="numpy").numpy().astype(np.float64)
    assert 0 <= u.min() and u.max() < 1
    # 5 standard errors: mean 1/sqrt(12 n), variance of a uniform (1/12) about 1/sqrt(180 n)
    assert abs(u.mean() - 0.5) < 5 * math.sqrt(1 / 12 / n)
    assert abs(u.var() - 1 / 12) < 5 * math.sqrt(1 / 180 / n)
    assert abs(z.mean()) < 5 / math.sqrt(n) and abs(z.std() - 1) < 5 / math.sqrt(2 * n)
    assert abs((np.abs(z) > 3).mean() - 0.0026998) < 5 * math.sqrt(0.0027 / n)
    assert scipy_stats.kstest(u, "uniform").pvalue > 1e-4
    assert scipy_stats.kstest(z, "norm").pvalue > 1e-4
    # neighbouring counters are independent, and so are the two words of one output (the
    # uniform is word 0; the normal at the same counter takes its angle from word 1)
    g = lb.default_rng(2024)
    g.offset = n  # z's counters
    same_counters = g.uniform((n,), device="numpy").numpy()
    for a, b in ((u[:-1], u[1:]), (z[:-1], z[1:]), (same_counters, z)):
        assert abs(np.corrcoef(a, b)[0, 1]) < 5 / math.sqrt(n)
    # the 24-bit grid: n draws of 2**24 values repeat about n**2 / 2**25 of them (3 %)
    assert len(np.unique(u)) > 0.96 * n
    assert abs((z > 0).mean() - 0.5) < 5 * 0.5 / math.sqrt(n)
