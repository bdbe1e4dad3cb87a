"""What Python's cyclic collector costs lazyburn's training step on a CUDA GPU, in a process
with PyTorch and transformers imported (as ``train_gpu.py``'s is).

    LAZYBURN_AUTOTUNE_PROCESS_BUDGET=0 python benchmarks/train_gc.py

The step is ``train_gpu.py``'s (a BERT masked LM of MiniLM-L6's size, batch 32 x 128,
forward, backward, AdamW; lazyburn's weights from its own initialization). After 4 warm-up
steps, 30 steps are run four ways: each waited for (``lazyburn.runtime.cuda.synchronous``) or
back to back (asynchronous syncs, one wait at the end), before and after ``gc.freeze()`` moves
every object made so far (the model, the optimizer, the imported libraries) out of the
collector's reach. Printed per way: the mean and median ms per step, and the full (generation
2) collections made meanwhile with the time they took (``gc.callbacks``). A recorded step
keeps some 9 000 objects alive until its sync; their number, promoted into the oldest
generation, is what triggers full collections, whose cost grows with everything else alive.
"""
import gc
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import lazyburn as lb  # noqa: E402
from lazyburn.models.bert import BertConfig, BertForMaskedLM  # noqa: E402
from train_gpu import SIZE, batches  # noqa: E402

model = BertForMaskedLM(BertConfig(**SIZE), device="cuda:0")
opt = lb.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
data = [(lb.tensor(i, device="cuda:0"), lb.tensor(t, device="cuda:0")) for i, t in batches(40)]


def step(k):
    ids, labels = data[k]
    loss = model(ids, labels=labels)
    opt.zero_grad()
    loss.backward()
    opt.step()


for k in range(4):
    step(k)
torch.cuda.synchronize()
events = []
gc.callbacks.append(lambda ph, info: events.append((ph, info["generation"], time.perf_counter())))


def full_collections():
    """(ms spent in full collections, how many) since ``events`` was cleared."""
    spent, start = 0.0, None
    for ph, g, t in events:
        if ph == "start":
            start = t
        elif g == 2:
            spent += t - start
    return spent * 1e3, sum(1 for ph, g, _ in events if ph == "stop" and g == 2)


for frozen in (False, True):
    if frozen:
        gc.collect()
        gc.freeze()
    for mode in (True, False):
        lb.runtime.cuda.synchronous = mode
        torch.cuda.synchronize()
        events.clear()
        ts = []
        t0 = time.perf_counter()
        for k in range(4, 34):
            t = time.perf_counter()
            step(k)
            if mode:
                torch.cuda.synchronize()
            ts.append((time.perf_counter() - t) * 1e3)
        torch.cuda.synchronize()
        total = (time.perf_counter() - t0) * 1e3 / 30
        spent, n = full_collections()
        print(f"frozen={frozen} synchronous={mode}: mean {total:.1f} ms/step, median "
              f"{statistics.median(ts):.1f}; full collections {n} taking {spent:.0f} ms in "
              f"30 steps")
print("objects", len(gc.get_objects()), "frozen", gc.get_freeze_count())
