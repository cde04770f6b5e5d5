"""The memory service's shell: read the history, assemble, hand the request to the llm
service, ack."""

from __future__ import annotations

import logging

import orjson
from faststream.nats import NatsBroker, NatsMessage
from loopwire.shared.envelopes import AssembleContext, ToolSpec
from loopwire.shared.runtime import ServiceContext
from pydantic import ValidationError

from .assembly import build_generate

log = logging.getLogger("loopwire.memory")


class MemoryService:
    name = "memory"

    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx

    def register(self, broker: NatsBroker) -> None:
        self.ctx.work_subscriber(self.ctx.subjects.memory_assemble, "memory")(self.on_assemble)

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def on_assemble(self, msg: NatsMessage) -> None:
        try:
            env = AssembleContext.model_validate(orjson.loads(msg.body))
        except (orjson.JSONDecodeError, ValidationError) as exc:
            log.error("malformed assemble envelope dropped: %s", exc)
            await msg.term()
            return
        try:
            history = await self.ctx.sessions.history(env.session_id, 0, env.history_len - 1) \
                if env.history_len > 0 else []
            catalog = await self._catalog() if env.offer_tools else {}
            request = build_generate(env, history, catalog)
            await self.ctx.bus.publish_work(self.ctx.subjects.llm_generate, request,
                                            msg_id=f"{env.step_id}:generate")
        except Exception:
            log.exception("session %s: assembling %s failed; it will be redelivered", env.session_id, env.step_id)
            await msg.nack(delay=1.0)
            return
        await msg.ack()

    async def _catalog(self) -> dict[str, ToolSpec]:
        from loopwire.tools.catalog import read_catalog

        s = self.ctx.settings
        return await read_catalog(self.ctx.redis, max_age_s=s.discovery_interval_s * s.discovery_misses * 2)
