"""The benchmarks time tuned kernels: every kernel a benchmark session meets is tuned at its
first launch (``LAZYBURN_AUTOTUNE_PROCESS_BUDGET`` unbounded unless set), where the default
process budget, meant for a cold start, would leave kernels met late in the session untuned."""
import os

os.environ.setdefault("LAZYBURN_AUTOTUNE_PROCESS_BUDGET", "inf")
