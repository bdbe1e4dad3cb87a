"""Timing a WebGPU device's syncs: where the host's and the device's time goes (see
``SyncProfile``); used by ``WebGPUBackend.profile`` and by the tuner's launch timings."""
from __future__ import annotations

import numpy as np

MAX_TIMED_PASSES = 256
"""Kernels timed on the device per sync (two timestamps each in one query set)."""


class SyncProfile:
    """Where the time of each sync goes, in seconds per sync: the host's ``alloc`` (buffers,
    from the pool or new), ``encode`` (bind groups and passes), ``submit`` and ``wait`` (for
    the queue), and, where the adapter has ``timestamp-query``, ``device`` (the kernels'
    passes on the device, from the first pass's start to the last one's end) and
    ``kernels`` (the sum of the passes' own times). Only the first ``MAX_TIMED_PASSES`` kernels
    of a sync are timed on the device. Reading the timestamps back adds to the sync it
    profiles, so time the benchmark's runs without a profile."""

    PHASES = ("alloc", "encode", "submit", "wait")

    def __init__(self, backend):
        self.backend = backend
        self.on_device = backend.has_timestamps
        self.syncs: list[dict] = []
        self._current: dict = {}
        self.passes = 0
        if self.on_device:
            wgpu = backend.wgpu
            self.queries = backend.device.create_query_set(type=wgpu.QueryType.timestamp,
                                                           count=2 * MAX_TIMED_PASSES)
            self.resolved = backend.device.create_buffer(
                size=16 * MAX_TIMED_PASSES,
                usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC)

    def add(self, phase: str, seconds: float) -> None:
        self._current[phase] = self._current.get(phase, 0.0) + seconds

    def end_sync(self) -> None:
        record, self._current = self._current, {}
        if self.passes:
            raw = self.backend.queue.read_buffer(self.resolved, 0, 16 * self.passes)
            ns = np.frombuffer(raw, dtype=np.uint64).astype(np.int64).reshape(-1, 2)
            record["device"] = float(ns[:, 1].max() - ns[:, 0].min()) * 1e-9
            record["kernels"] = float((ns[:, 1] - ns[:, 0]).sum()) * 1e-9
            self.passes = 0
        self.syncs.append(record)

    def median(self, phase: str) -> float | None:
        """The median over the recorded syncs of ``phase``'s seconds (None if never timed)."""
        values = sorted(s[phase] for s in self.syncs if phase in s)
        return values[len(values) // 2] if values else None
