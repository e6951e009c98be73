"""Stratified sampler: allocation rules and the streaming equal-allocation bound."""

import random

from driftmatrix.data.sources.sampling import (StratifiedSampler, equal_quotas, priority,
                                               proportional_quotas)


def test_proportional_quotas_largest_remainder():
    assert proportional_quotas({"a": 10, "b": 30, "c": 60}, 10) == {"a": 1, "b": 3, "c": 6}
    # 7 * (1, 1, 1) / 3 = 2.33 each: one extra unit, to the first stratum in order
    assert proportional_quotas({"a": 5, "b": 5, "c": 5}, 7) == {"a": 3, "b": 2, "c": 2}
    assert proportional_quotas({"a": 2, "b": 1}, 10) == {"a": 2, "b": 1}


def test_equal_quotas_water_filling():
    assert equal_quotas({"a": 1, "b": 10, "c": 10}, 9) == {"a": 1, "b": 4, "c": 4}
    assert equal_quotas({"a": 1, "b": 10, "c": 10}, 10) == {"a": 1, "b": 5, "c": 4}
    assert equal_quotas({"a": 1, "b": 2}, 10) == {"a": 1, "b": 2}


def _records(n, strata, seed):
    rng = random.Random(seed)
    return [(rng.choice(strata) if i % 3 else strata[0], f"id{i}") for i in range(n)]


def test_streaming_equal_matches_brute_force_and_stays_bounded():
    strata = ["s0", "s1", "s2", "s3", "s4"]
    recs = _records(5000, strata, 0)
    s = StratifiedSampler(300, seed=42, allocation="equal", recheck_every=100)
    peak = 0
    for stratum, rid in recs:
        s.offer(stratum, rid, rid)
        peak = max(peak, s.candidates)
    assert peak <= 300 + len(strata) + 100 + 300  # before the first trim everything is kept
    got = sorted(p for _, p in s.result())
    by = {}
    for stratum, rid in recs:
        by.setdefault(stratum, []).append(rid)
    quotas = equal_quotas({k: len(v) for k, v in by.items()}, 300)
    want = sorted(r for k, v in by.items() for r in sorted(v, key=lambda r: priority(42, r))[:quotas[k]])
    assert got == want and len(got) == 300


def test_fixed_quotas_pick_lowest_priorities_and_flag_duplicates():
    s = StratifiedSampler(2, seed=1, quotas={"a": 2})
    ids = [f"r{i}" for i in range(50)]
    for rid in ids:
        assert s.offer("a", rid, rid)
    assert not s.offer("a", min(ids, key=lambda r: priority(1, r)), None)  # still a candidate: duplicate
    assert [p for _, p in s.result()] == sorted(ids, key=lambda r: priority(1, r))[:2]


def _brute_proportional(recs, size, seed):
    by = {}
    for stratum, rid in recs:
        by.setdefault(stratum, []).append(rid)
    quotas = proportional_quotas({k: len(v) for k, v in by.items()}, size)
    return sorted(r for k, v in by.items() for r in sorted(v, key=lambda r: priority(seed, r))[:quotas[k]])


def _offer_all(sampler, recs):
    for stratum, rid in recs:
        sampler.offer(stratum, rid, rid)
    return sampler


def test_pooled_proportional_is_exact_or_says_so():
    recs = _records(4000, ["a", "b", "c", "d"], 3)
    want = _brute_proportional(recs, 500, 9)
    roomy = _offer_all(StratifiedSampler(500, seed=9), recs)
    assert roomy.complete() and sorted(p for _, p in roomy.result()) == want
    assert roomy.candidates <= int(500 * 1.25) + 64
    tight = _offer_all(StratifiedSampler(500, seed=9, headroom=0.5), recs)  # pool smaller than the sample
    assert not tight.complete()
    second = _offer_all(StratifiedSampler(500, seed=9, quotas=tight.quotas()), recs)
    assert second.complete() and sorted(p for _, p in second.result()) == want
