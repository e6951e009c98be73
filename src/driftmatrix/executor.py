"""Executors: run a list of work items and yield results as they finish (local for now)."""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator


class LocalExecutor:
    """Items run one after another in this process, on a context built once."""

    def map(self, fn: Callable[[Any, Any], Any], recipe, items: Iterable[Any], *, model: str | None = None,
            label: str = "work", context: Any = None) -> Iterator[tuple[Any, Any]]:
        ctx = context if context is not None else recipe.build()
        for item in items:
            yield item, fn(ctx, item)


def make_executor(params=None) -> LocalExecutor:
    return LocalExecutor()
