"""Units/s and overhead per unit of the local and Ray executors, for a trivial unit and a tiny torch unit.

    python bench/executor_overhead.py [--units 200] [--torch-units 60] [--cpus 2]

Ray is started once (its start-up is printed apart) and warmed with one map before the timed
ones, so the figures are steady-state: what each further unit costs.
"""

from __future__ import annotations

import argparse
import logging
import time
from dataclasses import dataclass

from driftmatrix.runtime.executor import LocalExecutor, RayExecutor, start_ray
from driftmatrix.config import RuntimeConfig


@dataclass(frozen=True)
class Data:
    rows: int = 256

    def build(self):
        import torch

        gen = torch.Generator().manual_seed(0)
        x = torch.randn(self.rows, 32, generator=gen)
        return {"x": x, "y": x @ torch.randn(32, 1, generator=gen)}


def trivial(ctx, item):
    return item


def tiny_training(ctx, seed):
    """About 80 Adam steps of a 32 -> 64 -> 1 MLP."""
    import torch

    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(10):
        for idx in torch.randperm(len(ctx["x"])).split(32):
            loss = torch.nn.functional.mse_loss(model(ctx["x"][idx]), ctx["y"][idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model.state_dict()


def timed(executor, fn, n: int) -> float:
    start = time.perf_counter()
    got = sum(1 for _ in executor.map(fn, Data(), range(n), label=fn.__name__))
    assert got == n
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--units", type=int, default=200)
    ap.add_argument("--torch-units", type=int, default=60)
    ap.add_argument("--cpus", type=int, default=2)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    cfg = RuntimeConfig(executor="ray")
    t0 = time.perf_counter()
    start_ray(cfg, num_cpus=args.cpus)
    print(f"ray start ({args.cpus} CPUs): {time.perf_counter() - t0:.1f} s")
    ray_ex = RayExecutor(cfg, progress=False)
    t0 = time.perf_counter()
    timed(ray_ex, tiny_training, args.cpus)  # workers started, torch imported, contexts built
    print(f"ray warm-up ({args.cpus} units, worker start + torch import + context): {time.perf_counter() - t0:.1f} s")
    import torch

    threads = torch.get_num_threads()
    for fn, n in ((trivial, args.units), (tiny_training, args.torch_units)):
        # a unit computes with floor(num_cpus) threads on every executor; each Ray worker runs 1 here
        for name, ex in ((f"local ({threads} threads)", LocalExecutor(RuntimeConfig(num_cpus=threads), progress=False)),
                         ("local (1 thread)", LocalExecutor(RuntimeConfig(num_cpus=1), progress=False)),
                         ("ray", ray_ex)):
            secs = timed(ex, fn, n)
            print(f"{fn.__name__:<14} {name:<18} {n} units in {secs:6.2f} s: {n / secs:8.1f} units/s, "
                  f"{1000 * secs / n:7.2f} ms per unit")


if __name__ == "__main__":
    main()
