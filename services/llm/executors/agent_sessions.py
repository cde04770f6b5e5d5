"""Which agent session continues a loopwire session: one Redis record per session.

keys.executor_session (JSON): the profile and agent, the agent's own session id, the working
directory it runs in, and how many of loopwire's history blocks it has been given
(prompt.py). Written before the agent takes a step's input (with the session id chosen
for a new agent session) and again when the agent reports its id, so a crash at any
point leaves a record that says what the agent already has: the redelivered step resumes
that session, or, on a machine without its files, starts a new one from the history.

The record expires with the session's other state (LOOPWIRE_SESSION_TTL_S).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import orjson
import redis.asyncio as aioredis

from loopwire.shared.contract import keys


@dataclass
class AgentSession:
    profile: str
    agent: str | None
    agent_session: str
    cwd: str
    given: int
    """History blocks the agent's session has taken as input."""
    step_id: str = ""
    """The step that gave them (a redelivery of it finds its input given already)."""
    context_tokens: int = 0
    """The agent's context after its last turn, as it reported it (ContextGuard)."""

    def same_agent(self, profile: str, agent: str | None) -> bool:
        return self.profile == profile and self.agent == agent


class AgentSessions:
    def __init__(self, redis: aioredis.Redis, ttl_s: int = 0) -> None:
        self.redis = redis
        self.ttl_s = ttl_s

    async def get(self, session_id: str) -> AgentSession | None:
        raw = await self.redis.get(keys.executor_session(session_id))
        if raw is None:
            return None
        data: dict[str, Any] = orjson.loads(raw)
        try:
            return AgentSession(**{k: data[k] for k in AgentSession.__dataclass_fields__ if k in data})
        except TypeError:
            return None  # written by an incompatible version: start a new agent session

    async def put(self, session_id: str, record: AgentSession) -> None:
        await self.redis.set(keys.executor_session(session_id), orjson.dumps(asdict(record)), ex=self.ttl_s or None)
