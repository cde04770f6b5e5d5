"""The llm side of an agent's permission request for an `approve` tool.

The agent waits inside its step; the checkpoint must be durable, so it lives in the
router's state, not here. `PermissionGate.ask` sends the request to the router (an
`ExecutorPermission`, as a step result travels: a call in `loopwire up`, a
`router.result` work message otherwise), the router opens the checkpoint
(`approval.requested`, the session `awaiting_approval`), and the `decision` comes back as
a core NATS notice on `<prefix>.ctl.<sid>.permission`. A notice can be lost (a
reconnect), so while it waits the gate asks again every `resend_s`: the router answers a
checkpoint decided before with the same decision, and one still open with nothing.

The checkpoint id is `<run_id>-<the agent's tool_use_id>`: asked again, it is the same
checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from loopwire.shared.contract import codec, message_ids
from loopwire.shared.contract.envelopes import ExecutorPermission, Generate
from loopwire.shared.runtime.service_context import ServiceContext

from ..settings import LlmSettings
from .base import PermissionRequest

log = logging.getLogger("loopwire.llm.executors.permissions")

RESEND_S = 5.0


def checkpoint_id(run_id: str, tool_use_id: str) -> str:
    return f"{run_id}-{tool_use_id}"


class PermissionGate:
    def __init__(self, ctx: ServiceContext[LlmSettings], resend_s: float = RESEND_S) -> None:
        self.ctx = ctx
        self.resend_s = resend_s
        self._waiting: dict[str, asyncio.Future[tuple[bool, str | None]]] = {}
        self._sub: Any = None

    async def start(self) -> None:
        self._sub = await self.ctx.bus.nc.subscribe(self.ctx.subjects.permission_all, cb=self._on_notice)

    async def stop(self) -> None:
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
            self._sub = None

    async def _on_notice(self, msg: Any) -> None:
        with contextlib.suppress(Exception):
            body = codec.loads(msg.data)
            waiting = self._waiting.get(str(body.get("checkpoint_id")))
            if waiting is not None and not waiting.done():
                waiting.set_result((body.get("decision") == "approve", body.get("note")))

    async def ask(self, env: Generate, request: PermissionRequest, turn: int) -> tuple[bool, str | None]:
        """(approved, the decision's note), once someone decided."""
        cid = checkpoint_id(env.run_id, request.tool_use_id)
        answer: asyncio.Future[tuple[bool, str | None]] = asyncio.get_running_loop().create_future()
        self._waiting[cid] = answer
        try:
            attempt = 0
            while True:
                ask = ExecutorPermission(session_id=env.session_id, run_id=env.run_id, step_id=env.step_id,
                                         turn=turn, trace=dict(env.trace), checkpoint_id=cid,
                                         tool_use_id=request.tool_use_id, name=request.name, input=request.input,
                                         attempt=attempt)
                try:
                    await self.ctx.dispatch.send(ask, msg_id=message_ids.permission_ask_msg_id(env.step_id, cid, attempt),
                                                 replica=env.result_to)
                except Exception as exc:  # NATS away: ask again at the next round
                    log.warning("session %s: permission request %s not sent: %s", env.session_id, cid, exc)
                with contextlib.suppress(TimeoutError):
                    return await asyncio.wait_for(asyncio.shield(answer), self.resend_s)
                attempt += 1
        finally:
            self._waiting.pop(cid, None)
