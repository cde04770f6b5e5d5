"""The memory service's way to the model: a call when the llm service runs in this process,
else a core NATS request to it.

Summaries (compaction) and observations are generations the memory service needs an
answer to before it can go on, so they are a request/reply on `<prefix>.rpc.llm.summarize`
(Subjects.llm_summarize) rather than a step of the run: a `Generate` without tools
goes out, a `GenerationResult` comes back. The llm service answers with its own model
factory, retries and fallbacks, and records the answer under the request's step id, so a
memory step that is redelivered after a crash gets the same summary without a second
model call. When no llm service answers in time, the caller gets `SummaryFailed` and
falls back (the guard drops old messages from the request instead). In `loopwire up` the
llm service beside this one answers the same way as a call, within the same timeout (the
dispatcher's `summarize` ask, shared/runtime/dispatcher.py, as exact counts are: exact_count.py).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import nats.errors
from pydantic import ValidationError

from loopwire.shared.contract import message_ids
from loopwire.shared.contract.envelopes import AssembleContext, Generate, GenerationResult, Usage
from loopwire.shared.contract.messages import Message, message_text

from .context_guard import Summarize, SummaryFailed

log = logging.getLogger("loopwire.memory.summarizer")


class LlmSummarizer:
    def __init__(self, ask: Callable[[Generate], Awaitable[GenerationResult]], timeout_s: float) -> None:
        self.ask = ask
        """The llm service's answer to a summary request (the dispatcher's `summarize` ask)."""
        self.timeout_s = timeout_s

    async def complete(self, env: AssembleContext, step_id: str, system: str, messages: list[Message],
                       max_tokens: int) -> tuple[str, Usage]:
        """One non-streamed generation for `env`'s run; the text and what it cost."""
        # The run's memory model when it has one: summaries need no more than that, and
        # its usage is priced as that model's (extra_model).
        models = [env.memory_model] if env.memory_model else env.models
        request = Generate(session_id=env.session_id, run_id=env.run_id, step_id=step_id, turn=env.turn,
                           trace=env.trace, models=models, system=system, messages=messages,
                           max_tokens=max_tokens)
        result = await self._answer(request)
        if not result.ok or result.message is None:
            err = result.error
            raise SummaryFailed(f"{err.code}: {err.message}" if err else "the model call failed", result.usage)
        text = message_text(result.message)
        return text, result.usage

    async def _answer(self, request: Generate) -> GenerationResult:
        try:
            return await self.ask(request)
        except nats.errors.NoRespondersError as exc:
            raise SummaryFailed("no llm service answers the summarize subject") from exc
        except (nats.errors.TimeoutError, TimeoutError) as exc:
            raise SummaryFailed(f"no summary within {self.timeout_s:.0f}s") from exc
        except (ValidationError, ValueError) as exc:
            raise SummaryFailed(f"unreadable summarize reply: {exc}") from exc

    def for_step(self, env: AssembleContext) -> Summarize:
        """The guard's `Summarize`, bound to one generation step (step ids
        `<step_id>:compact.<n>`, so a redelivered step replays its summaries)."""
        async def summarize(suffix: str, system: str, messages: list[Message],
                            max_tokens: int) -> tuple[str, Usage]:
            return await self.complete(env, message_ids.memory_step_id(env.step_id, suffix), system, messages, max_tokens)

        return summarize
