"""Deterministic, streaming, bounded-memory stratified sampling.

Every record gets a priority ``h = blake2b(seed, id)`` (a 64-bit integer). Within a stratum the
sample is always *the records with the smallest priorities*, so the result depends only on the
seed, the ids and the per-stratum quotas: not on file order, not on arrival order.

Quotas (how many of the ``size`` records each stratum gets) follow an allocation rule:

- ``proportional`` (default, the paper's skewed rating mix is kept): ``a_s = floor(size * n_s / n)``,
  the remaining units going to the largest fractional parts (ties: stratum order). Needs the
  final stratum sizes ``n_s``, so the caller counts them in a first pass and passes ``quotas``.
- ``equal``: every stratum gets the same share, a stratum with fewer records gives its unused share
  to the others ("water filling": ``a_s = min(n_s, L)`` with the largest level ``L`` that fits, plus
  one extra for the first strata in order until ``size`` is reached). One pass: the level can only
  fall as more records arrive, so a stratum never needs more than ``L + 1`` candidates and the
  candidate set stays at about ``size + #strata`` records.

Memory is one heap per stratum of at most its cap, so it is bounded by the sample, not the input.
Duplicates are found among the candidates (same id = same priority, so a duplicate of a record
that was already pruned can never be sampled either; it is only counted in ``n_s``).
"""

from __future__ import annotations

import hashlib
import heapq
from collections import Counter
from typing import Any, Hashable, Mapping

ALLOCATIONS = ("proportional", "equal")


def priority(seed: int, rid: str) -> int:
    """Seeded 64-bit hash of a record id: the sampling priority (smaller = sampled first)."""
    digest = hashlib.blake2b(rid.encode("utf-8"), digest_size=8, key=str(seed).encode()).digest()
    return int.from_bytes(digest, "big")


def proportional_quotas(counts: Mapping[Hashable, int], size: int) -> dict[Hashable, int]:
    """Largest-remainder proportional allocation of ``size`` over strata of ``counts``."""
    total = sum(counts.values())
    if total <= size:
        return dict(counts)
    keys = sorted(counts)
    base = {k: size * counts[k] // total for k in keys}
    left = size - sum(base.values())
    by_remainder = sorted(keys, key=lambda k: (-(size * counts[k] % total), keys.index(k)))
    for k in by_remainder[:left]:
        base[k] += 1
    return base


def equal_level(counts: Mapping[Hashable, int], size: int) -> int | None:
    """Largest ``L`` with ``sum(min(n_s, L)) <= size``; None when everything fits."""
    if sum(counts.values()) <= size:
        return None
    lo, hi = 0, max(counts.values())
    while lo < hi:  # invariant: fits(lo)
        mid = (lo + hi + 1) // 2
        if sum(min(n, mid) for n in counts.values()) <= size:
            lo = mid
        else:
            hi = mid - 1
    return lo


def equal_quotas(counts: Mapping[Hashable, int], size: int) -> dict[Hashable, int]:
    level = equal_level(counts, size)
    if level is None:
        return dict(counts)
    quotas = {k: min(n, level) for k, n in counts.items()}
    left = size - sum(quotas.values())
    for k in sorted(k for k, n in counts.items() if n > level)[:left]:
        quotas[k] += 1
    return quotas


class StratifiedSampler:
    """Bottom-priority candidates per stratum under caps; see the module docstring."""

    def __init__(self, size: int, seed: int, allocation: str = "proportional",
                 quotas: Mapping[Hashable, int] | None = None, recheck_every: int = 8192) -> None:
        if allocation not in ALLOCATIONS:
            raise ValueError(f"allocation {allocation!r} not in {ALLOCATIONS}")
        if allocation == "proportional" and quotas is None:
            raise ValueError("proportional allocation needs the quotas from a counting pass")
        self.size, self.seed, self.allocation = size, seed, allocation
        self.fixed = dict(quotas) if quotas is not None else None
        self.recheck_every = recheck_every
        self.heaps: dict[Hashable, list[tuple[int, str, Any]]] = {}  # max-heaps via negated priority
        self.members: set[str] = set()
        self.counts: Counter = Counter()
        self.level: int | None = None  # equal allocation: current water level (None = no cap yet)
        self._since = 0

    def cap(self, stratum: Hashable) -> int | None:
        if self.fixed is not None:
            return self.fixed.get(stratum, 0)
        return None if self.level is None else self.level + 1

    def offer(self, stratum: Hashable, rid: str, payload: Any) -> bool:
        """Consider one valid record; False if its id is already a candidate (a duplicate)."""
        if rid in self.members:
            return False
        self.counts[stratum] += 1
        h = priority(self.seed, rid)
        heap = self.heaps.setdefault(stratum, [])
        cap = self.cap(stratum)
        if cap is None or len(heap) < cap:
            heapq.heappush(heap, (-h, rid, payload))
            self.members.add(rid)
        elif cap > 0 and -heap[0][0] > h:
            _, old, _ = heapq.heapreplace(heap, (-h, rid, payload))
            self.members.discard(old)
            self.members.add(rid)
        if self.fixed is None:
            self._since += 1
            if self._since >= self.recheck_every:
                self._trim()
        return True

    def _trim(self) -> None:
        self._since = 0
        self.level = equal_level(self.counts, self.size)
        if self.level is None:
            return
        for heap in self.heaps.values():
            while len(heap) > self.level + 1:
                self.members.discard(heapq.heappop(heap)[1])

    @property
    def candidates(self) -> int:
        return sum(len(h) for h in self.heaps.values())

    def quotas(self) -> dict[Hashable, int]:
        if self.fixed is not None:
            return {k: min(q, len(self.heaps.get(k, ()))) for k, q in self.fixed.items()}
        return equal_quotas(self.counts, self.size)

    def result(self) -> list[tuple[Hashable, Any]]:
        """The sample as ``(stratum, payload)``, strata in order, by priority within a stratum."""
        out = []
        quotas = self.quotas()
        for stratum in sorted(self.heaps):
            best = sorted((-neg, rid, payload) for neg, rid, payload in self.heaps[stratum])
            out.extend((stratum, payload) for _, _, payload in best[:quotas.get(stratum, 0)])
        return out

    @property
    def offered(self) -> int:
        return sum(self.counts.values())
