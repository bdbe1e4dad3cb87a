"""The demo: capture a small graph, show it, sync it, and check it against NumPy."""
from __future__ import annotations

import numpy as np

import lazyburn as lb


def main(args) -> int:
    device = lb.runtime.canonical(args.device)
    print(f"device: {device}")
    rng = np.random.default_rng(0)
    x_host = rng.standard_normal((4, 8), dtype=np.float32)
    w_host = rng.standard_normal((8, 8), dtype=np.float32)
    x = lb.tensor(x_host, device=device)
    w = lb.tensor(w_host, device=device)

    h = lb.gelu(x @ w + 0.5)             # recorded, nothing computed yet
    y = lb.softmax(h * 0.125, axis=-1)
    print(f"recorded: y shape={y.shape} dtype={y.dtype} pending={y.is_pending}")
    g = lb.graph.to_networkx(y)
    print(f"pending graph: {g.number_of_nodes()} nodes, {g.number_of_edges()} edges")
    for v, data in g.nodes(data=True):
        print(f"  {v:>4} {data['op']:<10} {str(data['shape']):<10} {data['dtype']:<8} "
              f"{data['origin'] or ''}")
    lb.graph.sync()
    print(f"after sync: pending={y.is_pending}")

    import scipy.special

    hh = x_host @ w_host + 0.5
    hh = 0.5 * hh * (1 + scipy.special.erf(hh / np.sqrt(2)))
    z = hh * 0.125
    ref = np.exp(z - z.max(-1, keepdims=True))
    ref /= ref.sum(-1, keepdims=True)
    err = float(np.abs(y.numpy() - ref).max())
    print(f"max |lazyburn - numpy| = {err:.2e}")
    return 0 if err < 1e-5 else 1
