"""Launch configurations to choose from (``Candidate``) and which of them a level admits.

Backends build the lists (Triton block sizes, warps and stages; OpenCL local size, elements per
work-item and vector width; WGSL workgroup size; library-vs-generated for matmul); this module
only knows the shape of a list: a heuristic default first, then priority groups.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping, Sequence

#: ``LAZYBURN_AUTOTUNE`` levels.
OFF, SMALL, EXHAUSTIVE = 0, 1, 2


@dataclass(frozen=True)
class Candidate:
    """One launch configuration of a kernel.

    ``name``: stable and human-readable (``"BLOCK=1024,warps=4"``); the cache stores the winner
    by name, so two candidates of one list must not share a name.
    ``params``: what the backend needs to launch it; must be JSON-serializable (it is stored).
    ``priority``: its group. 0 is the heuristic-default group, whose first member is *the*
    default; a higher number is tried only at a higher level and after lower numbers (see
    :func:`lazyburn.autotune.tune`). Must be >= 0.

    Raises TypeError when ``params`` is not JSON-serializable, ValueError for an empty name or a
    negative priority.
    """

    name: str
    params: Mapping[str, Any] = field(default_factory=dict, hash=False)
    priority: int = 0

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"candidate name must be a non-empty str, got {self.name!r}")
        if isinstance(self.priority, bool) or not isinstance(self.priority, int) \
                or self.priority < 0:
            raise ValueError(f"candidate priority must be an int >= 0, got {self.priority!r}")
        params = dict(self.params)
        try:
            json.dumps(params, sort_keys=True)
        except (TypeError, ValueError) as e:
            raise TypeError(f"candidate {self.name!r}: params must be JSON-serializable: {e}") \
                from None
        # A read-only view: a candidate is a value, and the cache checksum depends on it.
        object.__setattr__(self, "params", MappingProxyType(params))

    def __repr__(self) -> str:
        return f"Candidate({self.name!r}, {dict(self.params)!r}, priority={self.priority})"

    def to_json(self) -> list:
        """``[name, params, priority]`` with plain JSON types."""
        return [self.name, dict(self.params), self.priority]


#: Which rule decided that a candidate's outputs match the default's; part of every checksum,
#: so that entries tuned under an earlier rule are tuned again. 2: floats within rtol of the
#: outputs' mean magnitude as well as of each output (rule 1 dropped correct register-blocked
#: GEMMs for rounding where outputs cancel).
MATCH_RULE = 2


def candidates_checksum(candidates: Sequence[Candidate]) -> str:
    """A 16-hex-digit checksum of a candidate list (names, params, priorities and their order)
    and of ``MATCH_RULE``.

    Part of the cache key: editing a backend's list re-tunes exactly the kernels tuned over it.
    """
    listed = [c.to_json() for c in candidates]
    text = json.dumps([MATCH_RULE, listed], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def validate(candidates: Sequence[Candidate]) -> Candidate:
    """Check a candidate list and return its default (the first candidate of priority 0).

    Raises ValueError for an empty list, duplicate names or no priority-0 candidate, TypeError
    for an element that is not a Candidate.
    """
    if not candidates:
        raise ValueError("autotune needs at least one candidate")
    seen = set()
    for c in candidates:
        if not isinstance(c, Candidate):
            raise TypeError(f"expected Candidate, got {type(c).__name__}")
        if c.name in seen:
            raise ValueError(f"duplicate candidate name {c.name!r}")
        seen.add(c.name)
    for c in candidates:
        if c.priority == 0:
            return c
    raise ValueError("no priority-0 candidate: the heuristic default must have priority 0")


def admitted(candidates: Sequence[Candidate], level: int) -> list[Candidate]:
    """The candidates a level considers, in list order, each launch once.

    Level 0: only the default. Level 1: priorities 0 and 1. Level 2 and above: all. A candidate
    whose params equal an earlier admitted one's (a list naming the default's launch a second
    time, say) is left out: it would launch the same kernel, and timing it again only spends
    the tuning budget.
    """
    default = validate(candidates)
    if level <= OFF:
        return [default]
    picked = [c for c in candidates if level >= EXHAUSTIVE or c.priority <= level]
    seen = {json.dumps(dict(default.params), sort_keys=True)}
    out = []
    for c in picked:
        launch = json.dumps(dict(c.params), sort_keys=True)
        if c is default or launch not in seen:
            seen.add(launch)
            out.append(c)
    return out


def priority_groups(candidates: Sequence[Candidate]) -> list[tuple[int, list[Candidate]]]:
    """``candidates`` grouped by priority, lowest number (tried first) first, list order kept
    within a group: ``[(0, [...]), (1, [...]), ...]``."""
    groups: dict[int, list[Candidate]] = {}
    for c in candidates:
        groups.setdefault(c.priority, []).append(c)
    return sorted(groups.items())
