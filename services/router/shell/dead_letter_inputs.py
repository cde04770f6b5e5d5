"""Work given up anywhere (shared/runtime/dead_letters.py), as the router takes it: its run
ends `failed` with an `error` `undeliverable`; a given-up ingress message is applied once
more first. Its handler never gives up in turn (an outage waits as long as it lasts)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable

from pydantic import ValidationError

from loopwire.shared.contract.subjects import WORK_STREAM, stream_name
from loopwire.shared.observability import metrics
from loopwire.shared.runtime.chain import Delivery
from loopwire.shared.runtime.dead_letters import discard_original, original_body, read_dead_letter, work_label
from loopwire.shared.runtime.redelivery import DeadLetter, Undeliverable, is_outage
from loopwire.shared.runtime.service_context import ServiceContext

from ..core.ingress import check_session_id, decode_ingress
from ..core.inputs import BaseInput, UndeliverableInput
from ..core.settings import RouterSettings

log = logging.getLogger("loopwire.router")


class DeadLetterInputs:
    def __init__(self, ctx: ServiceContext[RouterSettings], apply_input: Callable[[str, BaseInput], Awaitable[None]]) -> None:
        self.ctx = ctx
        self.apply_input = apply_input
        """Applies an input to a session (the router's lookups, lock and commit), or raises."""

    async def on_dead_letter(self, msg: Delivery) -> None:
        """Work given up (shared/runtime/dead_letters.py): its run ends `failed` with an `error`
        `undeliverable`. A given-up ingress message is applied once more first (an outage
        that outlasted its deliveries is over when this runs), and only reported as an
        error if applying it fails again."""
        js = self.ctx.bus.js
        try:
            letter = await read_dead_letter(js, msg.body)
        except (ValueError, ValidationError) as exc:
            raise Undeliverable(f"a malformed dead letter: {exc}") from None
        if letter is None:
            return
        prefix = self.ctx.settings.subject_prefix
        target = work_label(letter.subject, prefix)
        if target == "ingress":
            await self._dead_ingress(letter)
        elif letter.session_id:
            what = f"{target} (step {letter.step_id})" if letter.step_id else target
            await self.apply_input(letter.session_id, UndeliverableInput(
                input_id=f"dead:{letter.stream}:{letter.stream_seq}:{letter.step_id}:{letter.subject}",
                run_id=letter.run_id, what=what, reason=_why(letter)))
        else:
            log.error("dead letter for %s names no session: %s", letter.subject or "unknown work", letter.reason)
        metrics.DEAD_LETTERS.labels(target=target, cause=letter.reason.split(":", 1)[0] or "unknown").inc()
        if letter.stream == stream_name(prefix, WORK_STREAM):
            await discard_original(js, letter)

    async def _dead_ingress(self, letter: DeadLetter) -> None:
        parsed = self.ctx.subjects.parse_ingress(letter.subject)
        if parsed is None or not check_session_id(parsed[0], self.ctx.settings.tenants):
            return
        sid, verb = parsed
        body = await original_body(self.ctx.bus.js, letter)
        if body is not None:
            inp = decode_ingress(verb, body, input_id=f"in:{letter.stream_seq}", new_id=uuid.uuid4().hex[:16],
                                 max_bytes=self.ctx.settings.max_body_bytes)
            try:
                await self.apply_input(sid, inp)
                log.warning("session %s: %s (ingress %d) applied from its dead letter", sid, verb, letter.stream_seq)
                return
            except Exception as exc:
                if is_outage(exc):
                    raise  # still away: this dead letter is redelivered later
                log.exception("session %s: %s (ingress %d) fails again; reporting it", sid, verb, letter.stream_seq)
        await self.apply_input(sid, UndeliverableInput(
            input_id=f"dead:in:{letter.stream_seq}", what=f"your `{verb}` (ingress {letter.stream_seq})",
            reason=_why(letter)))


def _why(letter: DeadLetter) -> str:
    if letter.reason == "max_deliveries":
        return (f"given up after {letter.deliveries} deliveries (a service or its store was unreachable "
                "for longer than the outage tolerance, or the processes handling it kept stopping)")
    return f"given up after {letter.deliveries} deliveries: {letter.reason}"


