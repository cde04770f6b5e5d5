"""Finding tool providers on NATS through the services protocol's discovery (`$SRV.INFO`).

Every round sends one `$SRV.INFO` request and gathers the replies of every running
service instance until the replies fall silent (~300 ms) or a cap is reached. Each
reply is a service info (nats-py `nats.micro`, checked against 2.16)::

    {"type": "io.nats.micro.v1.info_response", "id": "<instance id>", "name": "adder",
     "version": "1.0.0", "description": ..., "metadata": {...},
     "endpoints": [{"name": "add", "subject": "add", "queue_group": "q",
                    "metadata": {"loopwire.tool": "add", "description": "Add two numbers.",
                                 "input_schema": "{\\"type\\": \\"object\\", ...}"}}]}

An endpoint whose metadata has `loopwire.tool` is a tool (endpoint metadata may be
null). Several instances serving one tool is normal: NATS queue groups spread the
calls. An instance that misses `discovery_misses` rounds in a row is forgotten.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from jsonschema.exceptions import SchemaError
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg

from loopwire.shared.contract.argument_schema import ArgumentValidator

from .registry import RESERVED_NAMES, TOOL_NAME_RE, compile_validator
from .retry import RetryPolicy
from .staging import EXECUTIONS, parse_depends_on

log = logging.getLogger("loopwire.tools.discovery")

INFO_SUBJECT = "$SRV.INFO"
TOOL_KEY = "loopwire.tool"
EXCLUSIVE_KEY = "loopwire.exclusive"
EXECUTION_KEY = "loopwire.execution"
DEPENDS_KEY = "loopwire.depends_on"


@dataclass(eq=False)
class DiscoveredTool:
    """One tool endpoint of one provider instance."""

    name: str
    description: str
    input_schema: dict[str, Any]
    subject: str
    service_name: str
    service_id: str
    exclusive: bool = False
    execution: str = "parallel"
    """`loopwire.execution`: `parallel`, `sequential` or `exclusive` (staging.py);
    `loopwire.exclusive: "true"` is the older spelling of `exclusive`."""
    depends_on: tuple[str, ...] = ()
    """`loopwire.depends_on`: tools whose calls in the same turn finish first."""
    validator: ArgumentValidator | None = field(default=None, repr=False)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    """From the endpoint metadata `loopwire.retries` / `loopwire.retry_backoff_s`."""


def parse_service_info(info: Any, warn: Callable[[str], None] = log.warning) -> list[DiscoveredTool]:
    """The tools of one `$SRV.INFO` reply; endpoints with a bad name or schema are left
    out (reported through `warn`)."""
    if not isinstance(info, dict) or not isinstance(info.get("id"), str):
        return []
    service_id, service_name = info["id"], str(info.get("name", ""))
    tools: list[DiscoveredTool] = []
    for endpoint in info.get("endpoints") or []:
        if not isinstance(endpoint, dict):
            continue
        meta = endpoint.get("metadata") or {}
        if not isinstance(meta, dict) or TOOL_KEY not in meta:
            continue
        name = meta[TOOL_KEY]
        where = f"service {service_name} ({service_id}) endpoint {endpoint.get('name')!r}"
        if not isinstance(name, str) or not TOOL_NAME_RE.match(name) or name in RESERVED_NAMES:
            warn(f"{where}: tool name {name!r} is not allowed; endpoint ignored")
            continue
        subject = endpoint.get("subject")
        if not isinstance(subject, str) or not subject:
            warn(f"{where}: no subject; endpoint ignored")
            continue
        try:
            schema = _decode_schema(meta.get("input_schema"))
            validator = compile_validator(schema)
        except (ValueError, SchemaError) as exc:
            warn(f"{where}: bad input_schema for tool {name}: {_short(exc)}; endpoint ignored")
            continue
        exclusive = str(meta.get(EXCLUSIVE_KEY, "")).lower() == "true"
        execution = str(meta.get(EXECUTION_KEY) or ("exclusive" if exclusive else "parallel")).strip().lower()
        try:
            if execution not in EXECUTIONS:
                raise ValueError(f"{EXECUTION_KEY} {meta.get(EXECUTION_KEY)!r} is not one of {', '.join(EXECUTIONS)}")
            depends_on = parse_depends_on(meta.get(DEPENDS_KEY))
        except ValueError as exc:
            # Run with another order than the provider asked for? No: the operator hears of it.
            warn(f"{where}: tool {name}: {exc}; endpoint ignored")
            continue
        tools.append(DiscoveredTool(
            name=name, description=str(meta.get("description") or ""), input_schema=schema,
            subject=subject, service_name=service_name, service_id=service_id,
            exclusive=execution == "exclusive", execution=execution, depends_on=depends_on,
            validator=validator, retry=RetryPolicy.from_metadata(meta),
        ))
    return tools


def _decode_schema(raw: Any) -> dict[str, Any]:
    if raw is None:
        return {"type": "object"}  # a tool without inputs
    if not isinstance(raw, str):
        raise ValueError("input_schema must be a JSON-encoded string")
    try:
        schema = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(schema, dict):
        raise ValueError("the schema must be a JSON object")
    return schema


def _short(exc: Exception) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


async def collect_infos(nc: NatsClient, *, quiet_s: float = 0.3, max_wait_s: float = 2.0,
                        max_replies: int = 10_000) -> list[dict[str, Any]]:
    """Send one `$SRV.INFO` and gather the replies until `quiet_s` passes without one,
    `max_wait_s` in all, or `max_replies`."""
    replies: asyncio.Queue[Msg] = asyncio.Queue()
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox, cb=replies.put)
    infos: list[dict[str, Any]] = []
    try:
        await nc.publish(INFO_SUBJECT, b"", reply=inbox)
        await nc.flush()
        deadline = time.monotonic() + max_wait_s
        while len(infos) < max_replies:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for loses a cancel that
                # lands as a reply arrives (measured: every time), and a stopping service
                # would wait forever for its discovery loop.
                async with asyncio.timeout(min(quiet_s, left)):
                    msg = await replies.get()
            except TimeoutError:
                break
            try:
                info = orjson.loads(msg.data)
            except orjson.JSONDecodeError:
                log.debug("ignoring a $SRV.INFO reply that is not JSON: %r %r", msg.headers, msg.data[:200])
                continue
            if isinstance(info, dict):
                infos.append(info)
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
    return infos


@dataclass
class Provider:
    """One service instance that serves at least one tool."""

    service_id: str
    service_name: str
    tools: list[DiscoveredTool]
    last_seen: float
    misses: int = 0


@dataclass
class RoundReport:
    seen: int = 0
    """Instances with tools that answered this round."""
    added: list[str] = field(default_factory=list)
    forgotten: list[str] = field(default_factory=list)


class ProviderTable:
    """The providers known now, updated from each round's infos (pure; no I/O)."""

    def __init__(self, max_misses: int) -> None:
        self.max_misses = max(1, max_misses)
        self.providers: dict[str, Provider] = {}
        self._warned: set[str] = set()

    def observe(self, infos: list[dict[str, Any]], now: float) -> RoundReport:
        report = RoundReport()
        answered: set[str] = set()
        for info in infos:
            tools = parse_service_info(info, warn=self._warn_once)
            if not tools:
                continue
            sid = tools[0].service_id
            answered.add(sid)
            if sid not in self.providers:
                report.added.append(sid)
                log.info("tool provider %s (%s) found: %s", tools[0].service_name, sid,
                         ", ".join(t.name for t in tools))
            self.providers[sid] = Provider(sid, tools[0].service_name, tools, last_seen=now)
        report.seen = len(answered)
        for sid, provider in list(self.providers.items()):
            if sid in answered:
                continue
            provider.misses += 1
            if provider.misses >= self.max_misses:
                del self.providers[sid]
                report.forgotten.append(sid)
                log.info("tool provider %s (%s) forgotten after %d silent rounds",
                         provider.service_name, sid, provider.misses)
        return report

    def tools_by_name(self) -> dict[str, list[tuple[DiscoveredTool, float]]]:
        """Every instance of every tool, with when its provider last answered; instances
        are in a stable order (service name, then instance id)."""
        out: dict[str, list[tuple[DiscoveredTool, float]]] = {}
        for provider in sorted(self.providers.values(), key=lambda p: (p.service_name, p.service_id)):
            for t in provider.tools:
                out.setdefault(t.name, []).append((t, provider.last_seen))
        return out

    def instances_on(self, subject: str) -> frozenset[str]:
        """The ids of the instances known now with an endpoint on `subject`: those that
        may take a request sent there."""
        return frozenset(p.service_id for p in self.providers.values() if any(t.subject == subject for t in p.tools))

    def _warn_once(self, message: str) -> None:
        # Every round sees the same bad endpoint again; say it once per process.
        if message not in self._warned:
            self._warned.add(message)
            log.warning("%s", message)


class Discovery:
    """Runs rounds against a NATS connection and keeps the provider table."""

    def __init__(self, nc: NatsClient, max_misses: int, *, quiet_s: float = 0.3,
                 max_wait_s: float = 2.0) -> None:
        self.nc = nc
        self.table = ProviderTable(max_misses)
        self.quiet_s = quiet_s
        self.max_wait_s = max_wait_s
        self.rounds = 0
        self.ready = asyncio.Event()
        """Set once the first round has completed."""
        self._lock = asyncio.Lock()

    async def run_round(self) -> RoundReport:
        # One round at a time: a refresh asked by the executor must not interleave with
        # the periodic one and count a miss twice.
        async with self._lock:
            infos = await collect_infos(self.nc, quiet_s=self.quiet_s, max_wait_s=self.max_wait_s)
            report = self.table.observe(infos, time.time())
            self.rounds += 1
            self.ready.set()
            return report
