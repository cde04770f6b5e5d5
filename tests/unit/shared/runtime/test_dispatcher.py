"""The dispatcher (shared/runtime/dispatcher.py): every envelope type on a work subject has one
route; a step result is a call of the router when it runs in this process, a `router.result`
work message otherwise, when stopping, and when the call fails (so the router's consumer
retries it). A result produced under a redelivered chain root is marked recover either way
(shared/runtime/chain.py). Counts and summaries are calls of the llm service here."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from functools import partial
from typing import Any, get_args

import pytest

from loopwire.memory.context_guard import SummaryFailed
from loopwire.memory.exact_count import LlmExactCount
from loopwire.memory.summarizer import LlmSummarizer
from loopwire.settings import Settings
from loopwire.shared.contract.envelopes import (
    AssembleContext,
    CountTokens,
    Generate,
    GenerationResult,
    StepError,
    StepResult,
    TokenCount,
    ToolResultItem,
    ToolsResult,
    Usage,
    WorkEnvelope,
)
from loopwire.shared.contract.subjects import Subjects
from loopwire.shared.runtime.chain import Delivery, run_handler
from loopwire.shared.runtime.dispatcher import RESULTS, index, work_routes
from loopwire.shared.runtime.service_context import ServiceContext
from tests.unit.shared.runtime.test_chain import root


class FakeBus:
    def __init__(self) -> None:
        self.published: list[tuple[str, Any, str, bool]] = []
        self.attempts: list[int] = []

    async def publish_work(self, subject: str, envelope: Any, msg_id: str, recover: bool = False,
                           attempts: int = 0) -> None:
        self.published.append((subject, envelope, msg_id, recover))
        self.attempts.append(attempts)


class FakeRouter:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.accepted: list[Any] = []

    async def accept_result(self, result: Any, recover: bool = False) -> None:
        if self.fail:
            raise ConnectionError("redis went away")
        self.accepted.append((result, recover))


def context(router: FakeRouter | None) -> tuple[ServiceContext, FakeBus]:
    settings = Settings()
    bus = FakeBus()
    ctx = ServiceContext(settings=settings, subjects=Subjects(settings.subject_prefix), redis=None,  # type: ignore[arg-type]
                         sessions=None, steps=None, events=None, broker=None, blobs=None,  # type: ignore[arg-type]
                         _bus=bus)  # type: ignore[arg-type]
    ctx.dispatch.in_process = True
    if router is not None:
        ctx.dispatch.serve(RESULTS, router.accept_result)
    return ctx, bus


def here(ctx: ServiceContext, llm: FakeLlm) -> None:
    """The llm service registered in this process, as LlmService.register does."""
    ctx.dispatch.serve((Generate,), lambda env, recover: llm.process(env))
    ctx.dispatch.answer("count_tokens", llm.count_tokens)
    ctx.dispatch.answer("summarize", llm.summarize)


def deliver(ctx: ServiceContext) -> Any:
    return ctx.dispatch.send(RESULT, msg_id="r1:t1:result")


def test_every_envelope_type_on_a_work_subject_has_one_route() -> None:
    subjects = Subjects("lwx")
    on_work = [t for union in (WorkEnvelope, StepResult) for t in get_args(get_args(union)[0])]
    routes = work_routes(subjects, direct_timeout_s=1.0)
    for kind in on_work:
        taking = [r for r in routes if kind in r.types]
        assert len(taking) == 1, (kind.__name__, [r.label for r in taking])
        assert taking[0].subject.startswith("lwx.work."), taking[0]
    assert {t for r in routes for t in r.types} == set(on_work), "no route for a type sent on no work subject"


def test_a_type_given_two_routes_is_refused() -> None:
    routes = work_routes(Subjects("lwx"), direct_timeout_s=1.0)
    with pytest.raises(ValueError, match="ExecuteTools has two routes"):
        index([*routes, routes[1]])


GENERATE = Generate(session_id="s1", run_id="r1", step_id="r1:g2", turn=2, models=["m"], messages=[], max_tokens=64)
RESULT = ToolsResult(session_id="s1", run_id="r1", step_id="r1:t1", turn=1,
                     results=[ToolResultItem(tool_use_id="toolu_1", name="noop", content="ok")])


async def test_the_router_in_this_process_gets_the_result_as_a_call() -> None:
    router = FakeRouter()
    ctx, bus = context(router)
    await deliver(ctx)
    assert router.accepted == [(RESULT, False)] and bus.published == []


@pytest.mark.parametrize("case", ["no router here", "stopping", "hand-over fails"])
async def test_otherwise_the_result_goes_out_as_a_work_message(case: str) -> None:
    router = None if case == "no router here" else FakeRouter(fail=case == "hand-over fails")
    ctx, bus = context(router)
    ctx.dispatch.stopping = case == "stopping"
    await deliver(ctx)
    assert bus.published == [(ctx.subjects.router_result, RESULT, "r1:t1:result", False)]
    assert router is None or router.accepted == []


@pytest.mark.parametrize("router_here", [True, False], ids=["call", "published"])
@pytest.mark.parametrize("delivered", [1, 2], ids=["first delivery", "redelivered"])
async def test_a_result_of_a_redelivered_root_is_marked_recover(router_here: bool, delivered: int) -> None:
    router = FakeRouter() if router_here else None
    ctx, bus = context(router)
    delivery, _ = root(delivered)

    async def handler(delivery: Delivery) -> None:
        await deliver(ctx)
        await delivery.ack()

    await run_handler(handler, delivery)
    recover = delivered > 1
    if router is not None:
        assert router.accepted == [(RESULT, recover)] and bus.published == []
    else:
        assert bus.published == [(ctx.subjects.router_result, RESULT, "r1:t1:result", recover)]


class FakeLlm:
    def __init__(self) -> None:
        self.summarized: list[Generate] = []

    async def process(self, env: Any, heartbeat: Any = None) -> Any:
        raise AssertionError("not asked here")

    async def count_tokens(self, request: CountTokens) -> TokenCount:
        return TokenCount(input_tokens=len(request.messages) + 6)

    async def summarize(self, env: Generate) -> GenerationResult:
        self.summarized.append(env)
        if env.system == "slow":
            await asyncio.sleep(5)
        if env.system == "fail":
            return GenerationResult(session_id=env.session_id, run_id=env.run_id, step_id=env.step_id, ok=False,
                                    error=StepError(code="overloaded", message="try later"), usage=Usage(input_tokens=4))
        return GenerationResult(session_id=env.session_id, run_id=env.run_id, step_id=env.step_id,
                                message={"role": "assistant", "content": [{"type": "text", "text": "noted"}]},
                                usage=Usage(input_tokens=9, output_tokens=2))


async def test_exact_counts_are_asked_of_the_llm_service_in_this_process() -> None:
    ctx, bus = context(None)
    here(ctx, FakeLlm())
    answer = await LlmExactCount(ctx)(CountTokens(model="m", messages=[{"role": "user", "content": "hi"}]))
    assert answer == TokenCount(input_tokens=7)


async def test_summaries_are_asked_of_the_llm_service_in_this_process() -> None:
    """A summary or an observation is a call when the llm service runs here (no NATS request:
    this context has no connection), with the same answers and failures as the request."""
    ctx, _ = context(None)
    llm = FakeLlm()
    here(ctx, llm)
    ctx.dispatch.asks["summarize"] = replace(ctx.dispatch.asks["summarize"], timeout_s=0.2)
    summarizer = LlmSummarizer(partial(ctx.dispatch.ask, "summarize"), 0.2)
    env = AssembleContext(session_id="s1", run_id="r1", step_id="r1:g1", turn=1, history_len=2, models=["m"],
                          memory_model="small", max_tokens=64)
    messages = [{"role": "user", "content": "hi"}]
    assert await summarizer.complete(env, "s1:observe:2", "observe", messages, 32) == \
        ("noted", Usage(input_tokens=9, output_tokens=2))
    (asked,) = llm.summarized
    assert (asked.step_id, asked.models, asked.messages, asked.max_tokens) == ("s1:observe:2", ["small"], messages, 32)
    with pytest.raises(SummaryFailed, match="overloaded: try later") as failed:
        await summarizer.complete(env, "s1:observe:3", "fail", messages, 32)
    assert failed.value.usage == Usage(input_tokens=4), "what the failed call cost still counts"
    with pytest.raises(SummaryFailed, match="no summary within 0s"):
        await summarizer.complete(env, "s1:observe:4", "slow", messages, 32)


def test_during_a_graceful_stop_nothing_is_called_in_process() -> None:
    ctx, bus = context(FakeRouter())
    ctx.dispatch.stopping = True
    asyncio.run(deliver(ctx))
    assert bus.published == [(ctx.subjects.router_result, RESULT, "r1:t1:result", False)]


class FailingRouter(FakeRouter):
    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    async def accept_result(self, result: Any, recover: bool = False) -> None:
        raise self.error


class FailingLlm(FakeLlm):
    def __init__(self, error: Exception) -> None:
        self.error = error
        self.asked = 0

    async def process(self, env: Any, heartbeat: Any = None) -> Any:
        self.asked += 1
        raise self.error


@pytest.mark.parametrize("error", [ConnectionError("redis went away"), ValueError("a bug")], ids=["outage", "fault"])
async def test_every_hand_over_that_fails_is_published_after_its_pause_with_its_attempt(
        error: Exception, monkeypatch: pytest.MonkeyPatch) -> None:
    """One policy for the router's results and the llm's generations alike
    (shared/runtime/dispatcher.py): the call, then the pause its second delivery would have
    had, then its own work message counting the attempt made here."""
    pauses: list[float] = []

    async def sleep(seconds: float) -> None:
        pauses.append(seconds)

    monkeypatch.setattr("loopwire.shared.runtime.redelivery.asyncio.sleep", sleep)
    ctx, bus = context(FailingRouter(error))
    llm = FailingLlm(error)
    here(ctx, llm)
    await deliver(ctx)
    await ctx.dispatch.send(GENERATE, msg_id="r1:t1:generate")
    assert llm.asked == 1
    assert bus.published == [(ctx.subjects.router_result, RESULT, "r1:t1:result", False),
                             (ctx.subjects.llm_generate, GENERATE, "r1:t1:generate", False)]
    assert bus.attempts == [1, 1]
    expected = ctx.policy.delay(1) if isinstance(error, ConnectionError) else 1.0
    assert pauses == [expected, expected]


async def test_a_target_not_here_gets_its_message_at_once_with_no_attempt(monkeypatch: pytest.MonkeyPatch) -> None:
    async def sleep(seconds: float) -> None:
        raise AssertionError("no pause before a first publish")

    monkeypatch.setattr("loopwire.shared.runtime.redelivery.asyncio.sleep", sleep)
    ctx, bus = context(None)
    await ctx.dispatch.send(GENERATE, msg_id="r1:t1:generate")
    assert bus.published == [(ctx.subjects.llm_generate, GENERATE, "r1:t1:generate", False)] and bus.attempts == [0]
