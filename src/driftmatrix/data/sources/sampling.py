"""Deterministic, streaming, bounded-memory stratified sampling.

Every record gets a priority ``blake2b(seed, id)``; a stratum's sample is always the records with
the smallest priorities, so it depends only on the seed, the ids and the quotas, never on order.

``proportional`` quotas need the final stratum sizes, so one pass keeps the ``headroom * size``
lowest priorities over all strata: every stratum's quota almost always lies among them, and then the
result is exact; :meth:`StratifiedSampler.complete` says whether it is, else the caller reads once
more with the known ``quotas``. ``equal`` quotas ("water filling") need one pass: the level only
falls as records arrive. Memory is bounded by the sample plus an 8-byte fingerprint per offered id,
kept so that a duplicate of a pruned record is still found and taken out of the counts
(:meth:`StratifiedSampler.flush`); two ids share one with probability about ``n^2 / 2^65``."""

from __future__ import annotations

import hashlib
import heapq
from functools import lru_cache
from collections import Counter
from typing import Any, Hashable, Mapping

import numpy as np

ALLOCATIONS = ("proportional", "equal")


@lru_cache(maxsize=8)
def _keyed(seed: int):
    return hashlib.blake2b(digest_size=8, key=str(seed).encode())


def priority(seed: int, rid: str) -> int:
    """Seeded 64-bit hash of a record id (keyed BLAKE2b): the sampling priority (smaller = first)."""
    h = _keyed(seed).copy()
    h.update(rid.encode("utf-8"))
    return int.from_bytes(h.digest(), "big")


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
    """Lowest-priority candidates under caps; see the module docstring for the three modes."""

    def __init__(self, size: int, seed: int, allocation: str = "proportional",
                 quotas: Mapping[Hashable, int] | None = None, recheck_every: int = 8192,
                 headroom: float = 1.25, flush_every: int = 1 << 18) -> None:
        if allocation not in ALLOCATIONS:
            raise ValueError(f"allocation {allocation!r} not in {ALLOCATIONS}")
        self.size, self.seed, self.allocation = size, seed, allocation
        self.fixed = dict(quotas) if quotas is not None else None
        self.pooled = allocation == "proportional" and quotas is None
        self.pool_cap = int(size * headroom) + 64
        self.recheck_every = recheck_every
        # max-heaps via negated priority: one per stratum, or one shared pool (key None)
        self.heaps: dict[Hashable, list[tuple[int, str, Hashable, Any]]] = {}
        self.members: set[str] = set()
        self.counts: Counter = Counter()
        self.level: int | None = None  # equal allocation: current water level (None = no cap yet)
        self._since = 0
        self.seen = np.empty(0, dtype=np.uint64)  # sorted fingerprints of the ids offered so far
        self.flush_every = flush_every
        self._pending: list[int] = []
        self._pending_meta: list[tuple[Hashable, str, Any]] = []
        self._late: list[tuple[str, Any]] = []

    def cap(self, stratum: Hashable) -> int | None:
        if self.pooled:
            return self.pool_cap
        if self.fixed is not None:
            return self.fixed.get(stratum, 0)
        return None if self.level is None else self.level + 1

    def offer(self, stratum: Hashable, rid: str, payload: Any, tag: Any = None) -> bool:
        """Consider one valid record; False for a duplicate candidate (others come from :meth:`flush`)."""
        if rid in self.members:
            return False
        self.counts[stratum] += 1
        h = priority(self.seed, rid)
        self._pending.append(h)
        self._pending_meta.append((stratum, rid, tag))
        if len(self._pending) >= self.flush_every:
            self._merge()
        key = None if self.pooled else stratum
        heap = self.heaps.get(key)
        if heap is None:
            heap = self.heaps[key] = []
        cap = self.cap(stratum)
        if cap is None or len(heap) < cap:
            heapq.heappush(heap, (-h, rid, stratum, payload))
            self.members.add(rid)
        elif cap > 0 and -heap[0][0] > h:
            old = heapq.heapreplace(heap, (-h, rid, stratum, payload))[1]
            self.members.discard(old)
            self.members.add(rid)
        if self.fixed is None and not self.pooled:
            self._since += 1
            if self._since >= self.recheck_every:
                self._trim()
        return True

    def flush(self) -> list[tuple[str, Any]]:
        """``(id, tag)`` of the duplicates found since the last call (not counted in ``counts``)."""
        self._merge()
        late, self._late = self._late, []
        return late

    def _merge(self) -> None:
        if not self._pending:
            return
        h = np.array(self._pending, dtype=np.uint64)
        order = np.argsort(h, kind="stable")
        dup = np.zeros(len(h), dtype=bool)
        dup[order[1:][h[order[1:]] == h[order[:-1]]]] = True  # repeats inside the batch (first kept)
        if len(self.seen):
            at = np.minimum(np.searchsorted(self.seen, h), len(self.seen) - 1)
            dup |= self.seen[at] == h
        for i in np.flatnonzero(dup):
            stratum, rid, tag = self._pending_meta[i]
            self.counts[stratum] -= 1
            self._late.append((rid, tag))
        # two sorted runs: the stable sort (timsort) merges them in linear time, in place
        self.seen = np.concatenate([self.seen, np.unique(h[~dup])])
        self.seen.sort(kind="stable")
        self._pending, self._pending_meta = [], []

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

    @property
    def offered(self) -> int:
        self._merge()
        return sum(self.counts.values())

    def _by_stratum(self) -> dict[Hashable, list[tuple[int, str, Any]]]:
        out: dict[Hashable, list[tuple[int, str, Any]]] = {}
        for heap in self.heaps.values():
            for neg, rid, stratum, payload in heap:
                out.setdefault(stratum, []).append((-neg, rid, payload))
        for items in out.values():
            items.sort(key=lambda x: (x[0], x[1]))
        return out

    def quotas(self) -> dict[Hashable, int]:
        self._merge()
        if self.fixed is not None:
            return dict(self.fixed)
        if self.allocation == "proportional":
            return proportional_quotas(self.counts, self.size)
        return equal_quotas(self.counts, self.size)

    def complete(self) -> bool:
        """True when every stratum holds its whole quota among the candidates (the sample is exact)."""
        have = Counter({s: len(v) for s, v in self._by_stratum().items()})
        return all(have[s] >= min(q, self.counts[s]) for s, q in self.quotas().items())

    def result(self) -> list[tuple[Hashable, Any]]:
        """The sample as ``(stratum, payload)``, strata in order, by priority within a stratum."""
        self._merge()
        quotas = self.quotas()
        by = self._by_stratum()
        return [(s, payload) for s in sorted(by) for _, _, payload in by[s][:quotas.get(s, 0)]]
