"""Plan a study on N GPUs (or N CPU workers) before having them: simulate the Ray schedule of its
(model, seed, cutoff) training units, then one evaluation per checkpoint (docs/scaling.md). Costs:
``gpu``, the authors' A100 GPU-hours split over configurations and over cutoffs by training rows;
``cpu``, throughput measured here (``CPU_RATES``). The schedule is Ray's list scheduling with
fractional resources and backfill, with a barrier between training and evaluation; a packed unit is
assumed to run as fast as alone (the reason to plan with ``--share 1`` as well)."""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Iterable, Mapping, Sequence

GRAIN = 10_000  # resources are counted in 1/10,000ths of a slot, as Ray does: 0.25 and 1/3 pack exactly
ORDERS = ("lpt", "fifo")
STAGES = ("train", "evaluate")


@dataclass(frozen=True)
class PaperCost:
    """What the authors' study of one dataset cost (protocol section 10, A100 GPU-hours)."""

    configs: int  # model-seed configurations
    train_hours: float
    eval_hours: float
    periods: int  # K slices (protocol section 5)
    rows: int | None = None  # dataset rows, where the protocol states them


PAPER = {  # keyed by dataset.name of the presets
    "yearbook": PaperCost(105, 23.7, 9.3, 104, 37_921),
    "amazon-reviews-2023": PaperCost(57, 116.6, 136.7, 20, 300_000),
    "arxiv": PaperCost(60, 272.3, 101.9, 26),
}

# (training, inference) samples per CPU-second of one thread, by bench/unit_cost.py on the 2-core
# development machine (torch 2.14, fp32, batch 64 / 256; pixels 32x32, text bodies over 128 cached
# 768-d token states, heads over pooled features), measured while the machine was shared (load
# about 10), so they are low by perhaps a fifth: CNN-S trains at 1,880 samples/s on both cores alone.
CPU_RATES: Mapping[str, tuple[float, float]] = {
    "MLP-S": (39235, 214445), "MLP-M": (12600, 73506), "MLP-L": (2454, 18405), "CNN-S": (745, 1616),
    "CNN-M": (312, 845), "CNN-L": (191, 503), "ResNet-S": (420, 1104), "ResNet-M": (110, 251),
    "ResNet-L": (36, 98), "ViT-S": (398, 2839), "ViT-M": (127, 643), "ViT-L": (44, 180),
    "FFN-S": (6718, 8919), "FFN-M": (5127, 8048), "FFN-L": (2688, 6208), "TextCNN-S": (652, 509),
    "TextCNN-M": (208, 258), "TextCNN-L": (67, 123), "BiGRU-S": (198, 1681), "BiLSTM-M": (161, 464),
    "BiLSTM-Attn-L": (38, 105), "TX-S": (337, 753), "TX-M": (55, 169), "TX-L": (23, 83),
    "BERT": (98562, 2939550), "RoBERTa": (100349, 3079054), "DeBERTa-v3": (70825, 2708027),
    "ELECTRA": (124537, 3199987), "MPNet": (88532, 2965132), "ModernBERT": (104183, 2812259),
    "DistilBERT": (106178, 3193138), "MiniLM-L6": (113131, 5196387), "DINOv2-S": (116335, 5129301),
    "DINOv3-S": (112738, 5173746), "CLIP-B32": (106619, 2991928), "SigLIP-B": (93794, 2913041),
    "ConvNeXt-S": (101809, 3171574), "ResNet50-IN": (93776, 1423237), "ViT-S16-IN21k": (89824, 5037716),
    "MAE-B": (106683, 3277497), "EVA02-B": (99678, 2948506), "EffNet-L0": (101416, 3261732),
}


@dataclass(frozen=True)
class Unit:
    stage: str  # train | evaluate
    dataset: str
    model: str
    seed: int
    cutoff: int
    hours: float
    share: float  # of one slot


class _Billed:
    @property
    def billed(self) -> float:
        """Slot-hours paid for: every slot held for the whole makespan."""
        return self.slots * self.makespan

    @property
    def utilisation(self) -> float:
        return self.busy / self.billed if self.billed else 0.0


@dataclass(frozen=True)
class Schedule(_Billed):
    slots: int
    units: int
    makespan: float  # hours
    busy: float  # slot-hours held by units (hours x share)


@dataclass(frozen=True)
class Shape:
    """What a study's units are made of (from a preset and, when at hand, its slices manifest)."""

    dataset: str
    models: tuple[str, ...]
    seeds: tuple[int, ...]
    train_rows: tuple[int, ...]  # per slice
    rows: tuple[int, ...]  # per slice, every split (an evaluation scores all of them)
    epochs: Mapping[str, int] = field(default_factory=dict)
    shares: Mapping[str, float] = field(default_factory=dict)  # GPUs per unit, per model


# --- the schedule --------------------------------------------------------------------------------
def _grains(share: float, slots: int, unit: Unit) -> int:
    need = round(share * GRAIN)
    if need <= 0 or (need > GRAIN and need % GRAIN):
        raise ValueError(f"unit {unit.model}/seed {unit.seed}/cutoff {unit.cutoff}: share {share} must be "
                         f"in (0, 1] or a whole number")
    if need > slots * GRAIN:
        raise ValueError(f"unit {unit.model} needs {share} slots; only {slots} exist")
    return need


def _place(free: list[int], need: int) -> list[tuple[int, int]] | None:
    """First fit: the (slot, grains) a unit takes, or None if it does not fit now."""
    if need <= GRAIN:
        for i, room in enumerate(free):
            if room >= need:
                return [(i, need)]
        return None
    whole = [i for i, room in enumerate(free) if room == GRAIN][: need // GRAIN]
    return [(i, GRAIN) for i in whole] if len(whole) == need // GRAIN else None


def simulate(units: Sequence[Unit], slots: int, order: str = "lpt") -> Schedule:
    """List-schedule ``units`` on ``slots`` slots of capacity 1.0 (see the module docstring)."""
    if slots < 1:
        raise ValueError(f"slots must be >= 1, got {slots}")
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    ranked = sorted(range(len(units)), key=lambda k: -units[k].hours) if order == "lpt" else range(len(units))
    queues: dict[int, deque[tuple[int, int]]] = {}  # grains -> (queue position, unit), in order
    for pos, k in enumerate(ranked):
        queues.setdefault(_grains(units[k].share, slots, units[k]), deque()).append((pos, k))
    free = [GRAIN] * slots
    running: list[tuple[float, int, list[tuple[int, int]]]] = []  # (end, tiebreak, allocation)
    now = makespan = busy = 0.0
    while queues:
        while True:  # start the earliest-queued unit that fits, until none does
            best = None
            for need, queue in queues.items():
                if best is None or queue[0][0] < queues[best][0][0]:
                    if _place(free, need) is not None:
                        best = need
            if best is None:
                break
            _, k = queues[best].popleft()
            if not queues[best]:
                del queues[best]
            alloc = _place(free, best)
            for i, grains in alloc:
                free[i] -= grains
            end = now + units[k].hours
            heapq.heappush(running, (end, k, alloc))
            busy += units[k].hours * units[k].share
            makespan = max(makespan, end)
        if not queues:
            break
        now = running[0][0]
        while running and running[0][0] <= now:  # every unit ending now frees its room
            for i, grains in heapq.heappop(running)[2]:
                free[i] += grains
    return Schedule(slots, len(units), makespan, busy)


def plan(units: Sequence[Unit], slots: int, order: str = "lpt") -> dict[str, Schedule]:
    """One schedule per stage, evaluation after training (the barrier between the two stages)."""
    return {stage: simulate([u for u in units if u.stage == stage], slots, order)
            for stage in STAGES if any(u.stage == stage for u in units)}


# --- the units of a study ------------------------------------------------------------------------
def gpu_units(shape: Shape, cost: PaperCost) -> list[Unit]:
    """Units costed by the authors' GPU-hours (module docstring)."""
    per_train, per_eval = cost.train_hours / cost.configs, cost.eval_hours / cost.configs
    cum = list(accumulate(shape.train_rows))
    whole, K = sum(cum), len(cum)
    units = []
    for model in shape.models:
        share = shape.shares.get(model, 1.0)
        units += [Unit("train", shape.dataset, model, seed, i, per_train * cum[i] / whole, share)
                  for seed in shape.seeds for i in range(K)]
        units += [Unit("evaluate", shape.dataset, model, seed, i, per_eval / K, share)
                  for seed in shape.seeds for i in range(K)]
    return units


def cpu_units(shape: Shape, rates: Mapping[str, tuple[float, float]] = CPU_RATES) -> list[Unit]:
    """Units costed by measured CPU throughput; each holds one worker."""
    missing = [m for m in shape.models if m not in rates]
    if missing:
        raise ValueError(f"no measured CPU throughput for {missing}; measured: {sorted(rates)}")
    cum = list(accumulate(shape.train_rows))
    total_rows = sum(shape.rows)
    units = []
    for model in shape.models:
        train_rate, infer_rate = rates[model]
        epochs = shape.epochs.get(model, 10)
        units += [Unit("train", shape.dataset, model, seed, i, epochs * n / train_rate / 3600, 1.0)
                  for seed in shape.seeds for i, n in enumerate(cum)]
        units += [Unit("evaluate", shape.dataset, model, seed, i, total_rows / infer_rate / 3600, 1.0)
                  for seed in shape.seeds for i in range(len(cum))]
    return units


def shape_of(params, manifest: Mapping | None = None, share: float | None = None,
             periods: int | None = None, rows: int | None = None, need_rows: bool = False) -> Shape:
    """The study of ``params``: slice sizes from ``manifest``, else ``periods`` equal slices of ``rows``."""
    from driftmatrix.config import ConfigError, runtime_config
    from driftmatrix.models.catalog import is_baseline

    name = params.dataset.name
    if manifest is not None and not periods:
        train = tuple(int(s["n_train"]) for s in manifest["slices"])
        every = tuple(int(s["n"]) for s in manifest["slices"])
    else:
        paper = PAPER.get(name)
        K = periods or (paper.periods if paper else None)
        if not K:
            raise ConfigError(f"{name}: number of slices unknown; give --periods (or --slices with a manifest)")
        n = rows or (paper.rows if paper else None)
        if n is None and need_rows:
            raise ConfigError(f"{name}: dataset size unknown; give --rows (or --slices with a manifest)")
        n = n or 1000 * K
        per = n / K
        every = tuple(round(per * (i + 1)) - round(per * i) for i in range(K))
        train = tuple(round(e * (1 - params.slicing.test_fraction)) for e in every)
    runtime = runtime_config(params)
    models = tuple(m for m in params.models if not is_baseline(m))  # Prior: no training to schedule
    shares = {m: share if share is not None else (runtime.resources_for(m).num_gpus or 1.0) for m in models}
    epochs = {m: params.train_for(m).epochs for m in models}
    return Shape(name, models, tuple(params.train.seeds), train, every, epochs, shares)


# --- report --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Row(_Billed):
    study: str
    units: int
    slots: int
    stages: Mapping[str, Schedule]

    @property
    def makespan(self) -> float:
        return sum(s.makespan for s in self.stages.values())

    @property
    def busy(self) -> float:
        return sum(s.busy for s in self.stages.values())


def rows_for(studies: Mapping[str, Sequence[Unit]], slots: Iterable[int], order: str = "lpt") -> list[Row]:
    """A row per (study, slot count), plus the studies pooled on one cluster when there are several."""
    named = dict(studies)
    if len(named) > 1:
        named["all (pooled)"] = [u for units in studies.values() for u in units]
    return [Row(name, sum(1 for u in units if u.stage == "train"), n, plan(units, n, order))
            for name, units in named.items() for n in slots]


def hours(h: float) -> str:
    return f"{h:,.1f} h" if h >= 1 else f"{h * 60:.1f} min"


def money(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:,.2f}"


def format_rows(rows: Sequence[Row], price: float, slot: str = "GPU") -> str:
    head = (f"| study | units | {slot}s | makespan (train + evaluate) | utilisation | {slot}-hours billed "
            f"| busy {slot}-hours | $ at {price:.2f}/{slot}-h |")
    lines = [head, "|" + "---|" * 8]
    for r in rows:
        parts = " + ".join(hours(r.stages[s].makespan) for s in STAGES if s in r.stages)
        lines.append(f"| {r.study} | {r.units:,} | {r.slots} | {hours(r.makespan)} ({parts}) | "
                     f"{100 * r.utilisation:.0f}% | {r.billed:,.1f} | {r.busy:,.1f} | {money(r.billed * price)} |")
    return "\n".join(lines)


def describe(scale: str, order: str, share: float | None) -> str:
    """The assumptions behind a table, printed above it."""
    cost = ("cost: the authors' A100 GPU-hours (protocol section 10), equal per model-seed configuration, "
            "spread over cutoffs by training rows" if scale == "gpu" else
            "cost: our measured CPU samples/s (bench/unit_cost.py), one unit per worker")
    packing = (f"{share} GPU per unit for every model" if share is not None
               else "GPUs per unit from runtime.num_gpus / overrides (0 counts as a whole GPU)")
    schedule = "longest first" if order == "lpt" else "submission order (model, seed, cutoff)"
    return (f"{cost}\nschedule: list scheduling, {schedule}, backfill, first fit; training, then evaluation"
            + (f"\npacking: {packing}; a packed unit is assumed to run as fast as alone" if scale == "gpu" else ""))
