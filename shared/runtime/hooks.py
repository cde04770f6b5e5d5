"""What the runtime tells the observability layer, which sits above it.

Layers run one way (docs/architecture.md, checked by `lint-imports`): the runtime may not
import observability. Yet it holds facts worth a metric (how many work chains this process
holds, runtime/chain_balance.py), publishes work that should carry the current trace
context when its envelope has none (runtime/bus.py), and consumes the work messages whose
handling wants a log context, a trace context and message metrics
(runtime/work_consumer.py). So the runtime calls the hooks below, and the observability
modules fill them in when they are imported (observability/metrics.py,
observability/tracing/propagation.py, observability/consume_scope.py; importing any
module of `loopwire.shared.observability` imports them). Until then the hooks do nothing, which is
what a process without observability would want.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

__all__ = ["HOOKS"]


def _nothing() -> None:
    return None


def _not_counted(label: str, to: str, via: str) -> None:
    return None


def _no_headers() -> dict[str, str]:
    return {}


def _no_scope(root: Any) -> AbstractContextManager[Any]:
    return contextlib.nullcontext()


class RuntimeHooks:
    """The callbacks the runtime calls; the observability layer assigns them."""

    def __init__(self) -> None:
        self.chain_opened: Callable[[], None] = _nothing
        """A work chain began in this process (the work-chains gauge goes up)."""
        self.chain_closed: Callable[[], None] = _nothing
        """A work chain of this process settled (the gauge goes down)."""
        self.dispatched: Callable[[str, str, str], None] = _not_counted
        """Work of the route `label` went to the service `to` `via` one door: chain,
        process, direct or jetstream (runtime/dispatcher.py)."""
        self.trace_headers: Callable[[], dict[str, str]] = _no_headers
        """W3C trace headers of the current span ({} when there is none)."""
        self.consume_scope: Callable[[Any], AbstractContextManager[Any]] = _no_scope
        """The scope around the handling of one consumed work message (its
        `work_consumer.JetStreamRoot`): log and trace context, message metrics, a span."""


HOOKS = RuntimeHooks()
