"""Every setting of a loopwire process from the environment (``LOOPWIRE_*``), composed:
the shared runtime's (shared/runtime/settings.py), each service's own
(services/<name>/settings.py; the router's in its core/) and the `loopwire` package's
own (`ProcessSettings`). This package launches every service, so it alone may import
them all; a service sees its own settings class, the runtime code RuntimeSettings, and a
process builds one `Settings` that is every one of them."""

from __future__ import annotations

from functools import lru_cache

from pydantic import field_validator

from loopwire.llm.settings import LlmSettings
from loopwire.memory.settings import MemorySettings
from loopwire.router.core.settings import RouterSettings
from loopwire.shared.runtime.settings import RuntimeSettings
from loopwire.tools.settings import ToolsSettings


class ProcessSettings(RuntimeSettings):
    """What the `loopwire` package itself reads: how `loopwire up` runs and tunes its
    processes, the UI's address, and the tenant a client acts for."""

    tenant: str | None = None
    """The tenant a client (the CLI, LoopwireClient.from_settings) acts for when tenants
    are on: its queries go to `<prefix>.api.<tenant>.…` and its reply inbox is
    `_INBOX_<tenant>` (deploy/nats/tenants.conf)."""
    metrics_host: str = "0.0.0.0"
    """Address of the /metrics, /healthz, /readyz server."""
    ui_port: int = 8765
    """Port of the session inspector, `loopwire ui` (a web page: sessions, live timelines,
    approvals, message / steer / abort, waterfalls, fork and replay)."""
    ui_host: str = "127.0.0.1"
    """Address `loopwire ui` listens on. Whoever reaches it can answer approvals, steer runs
    and replay sessions with live tools as the UI's NATS user: open it wider only behind
    your own access control."""
    data_dir: str = ".run"
    """Where `loopwire up --embedded` keeps the data and logs of the nats-server and
    redis-server it starts."""
    workers: int = 1
    """Processes `loopwire up` runs, each with all five services, so one machine's cores
    are all used (`loopwire up --workers N` overrides it); worker i serves /metrics on
    LOOPWIRE_METRICS_PORT + i. On Kubernetes keep 1 and scale with replicas."""

    # -- durability ---------------------------------------------------------------------
    drain_timeout_s: float = 20.0
    """On SIGTERM a replica stops taking work and gives the work it holds this long to
    finish; what is still running then is handed back (a nak with no delay, its claims
    released) for another replica, and the process exits 0. Under Kubernetes' 30 s grace
    period (the Helm chart's terminationGracePeriodSeconds follows it)."""
    local_handover: bool = True
    """When the receiving service runs in the same process (`loopwire up`), a run's hops
    are calls and tasks instead of JetStream messages, held by the run's first work
    message, which stays unacked until they are done, so a crash still redelivers it
    (shared/runtime/chain.py). Between `loopwire serve` processes the hops are JetStream
    messages (a step's result first goes to its router replica: LOOPWIRE_DIRECT_RESULTS)."""
    gc_thresholds: str = "100000,20,20"
    """Thresholds of Python's cyclic garbage collector (`gc.set_threshold`), set when the
    services start; empty keeps Python's `700,10,10`. See shared/runtime/gc_tuning.py: with the
    defaults a worker under load spent ~25% of its CPU collecting, ~10% at `20000,20,20`."""
    gc_freeze: bool = True
    """`gc.freeze()` once the services are up: the objects made at start-up are never
    walked by a collection again."""
    gc_idle_check_s: float = 2.0
    """How often a process looks whether a burst of work has ended; at the first quiet
    interval after a busy one it collects its garbage and returns its free heap to the OS
    (shared/runtime/gc_tuning.py, `IdleCollector`), so a pod's memory goes back down after
    the load. 0: never."""
    chain_balance: bool = True
    """`loopwire up` processes tell each other how many work chains they hold (core NATS
    `<prefix>.ctl.chains`); one holding more than its share publishes the next hop of a
    chain instead, so its run moves to another replica."""
    chain_balance_interval_s: float = 0.1
    """How often those processes report their chains, and how often one may shed its
    excess (shared/runtime/chain_balance.py). At 0.5 s, one of `up --workers 2`'s workers
    sat idle 0.2-0.3 s at the end of each of the bench's loads, at 0.1 s about 0.1 s."""

    @field_validator("gc_thresholds")
    @classmethod
    def _gc_thresholds(cls, value: str) -> str:
        from loopwire.shared.runtime.gc_tuning import parse_thresholds

        parse_thresholds(value)  # a clear error at start-up, not at the first collection
        return value


class Settings(ProcessSettings, RouterSettings, LlmSettings, ToolsSettings, MemorySettings):
    """One model of every setting: what `loopwire up` (all five services in one process),
    `loopwire serve`, the CLI and the UI read. Each field is declared once, in the class
    of the code that reads it."""


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()


GROUPS: tuple[tuple[type[RuntimeSettings], str], ...] = (
    (RuntimeSettings, "The shared runtime, and what more than one service reads (`shared/runtime/settings.py`)"),
    (ProcessSettings, "`loopwire up`, the UI and the client (`loopwire/settings.py`)"),
    (RouterSettings, "The router (`services/router/core/settings.py`)"),
    (LlmSettings, "The llm service (`services/llm/settings.py`)"),
    (ToolsSettings, "The tools service (`services/tools/settings.py`)"),
    (MemorySettings, "The memory service (`services/memory/settings.py`)"),
)
"""The README table's groups: each class's own fields, under its caption. The transcripts
service has no knob of its own (it reads the runtime's tenant and model limits), so no
class and no group."""


def settings_table() -> str:
    """The README's configuration tables, one per settings class, generated from the fields
    and their docstrings (a test keeps the README in sync)."""
    out: list[str] = []
    for cls, caption in GROUPS:
        inherited = RuntimeSettings.model_fields if cls is not RuntimeSettings else {}
        rows = [f"**{caption}**", "", "| variable | default | meaning |", "|---|---|---|"]
        for name, field in cls.model_fields.items():
            if name in inherited:
                continue
            default = field.default_factory() if field.default_factory is not None else field.default  # type: ignore[call-arg]
            shown = "—" if default in (None, [], {}) else f"`{default}`"
            meaning = " ".join((field.description or "").split()).replace("|", "\\|")
            rows.append(f"| `LOOPWIRE_{name.upper()}` | {shown} | {meaning} |")
        out.append("\n".join(rows) + "\n")
    return "\n".join(out)
