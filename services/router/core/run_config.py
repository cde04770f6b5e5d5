"""A run's settings, merged once at its start and kept in `RunConfig`.

StartRun's fields win over the strategy config's (strategy.py, resolved by the shell by
actor and expectation), which win over the profile's defaults (profiles.py), which win
over the operator's defaults (`CoreConfig`). Tools only narrow: a strategy's list, then
StartRun's. Permissions only tighten: the operator's tool policy is the floor
(tool_policy.py). A follow-up on an idle session starts its run with the stored
`last_config`, under the operator's policy as it is then (run_lifecycle.start_run).
"""

from __future__ import annotations

from loopwire.shared.contract.event_fields import SubagentLineage
from loopwire.shared.contract.messages import Message
from loopwire.shared.contract.protocol import FinishTool, Limits, StartRun, header_value, text_to_content
from loopwire.shared.contract.run_state import RunConfig

from . import step_requests, subagent
from .config import CoreConfig
from .finish import GUIDELINE
from .profiles import PROFILES
from .strategy import StrategyConfig
from .tool_policy import merge_permissions, narrow_tools


def run_config(body: StartRun, cfg: CoreConfig, strategy: StrategyConfig | None = None,
               *, depth: int = 0) -> RunConfig:
    """The run's settings: StartRun's, over the strategy config's (strategy.py), over the
    profile's defaults."""
    profile = PROFILES[body.profile]
    models = [body.model.primary or cfg.default_model, *body.model.fallbacks]
    base = strategy.limits if strategy is not None else Limits()
    limits = {name: getattr(body.limits, name) if getattr(body.limits, name) is not None else getattr(base, name)
              for name in Limits.model_fields}
    tools = narrow_tools(strategy.tools if strategy else None, body.tools)
    finish = body.finish if body.finish is not None else strategy.finish if strategy is not None else None
    # A strategy that asks for a conclusion gets the finish tool's guideline where the
    # run offers the tool (strategy_loop.finish_offered): its answer is to be the call.
    conclusion = strategy is not None and strategy.conclusion and profile.offers_finish and profile.offers_tools \
        and tools != [] and finish is not False
    caps = {"max_inner_iterations": cfg.max_inner_iterations or profile.max_inner_iterations,
            "max_outer_iterations": cfg.max_outer_iterations or profile.max_outer_iterations}
    over = [name for name, cap in caps.items() if limits[name] is not None and limits[name] > cap]
    return RunConfig(
        max_inner_iterations=min(limits["max_inner_iterations"], caps["max_inner_iterations"])
        if limits["max_inner_iterations"] is not None else None,
        max_outer_iterations=min(limits["max_outer_iterations"], caps["max_outer_iterations"])
        if limits["max_outer_iterations"] is not None else None,
        progress_injection=limits["progress_injection"], over_ceiling=over,
        profile=body.profile, models=models, max_tokens=body.model.max_tokens or cfg.default_max_tokens,
        system=strategy.system_prompt(body.system, (GUIDELINE,) if conclusion else ()) if strategy else body.system,
        temperature=body.model.temperature,
        memory_model=step_requests.memory_model(body.model, cfg.memory_model, cfg.lightweight_model),
        lightweight_model=step_requests.lightweight_of(body.model, cfg.lightweight_model),
        model_selection=body.model.selection, prompt_cache=body.model.prompt_cache,
        tools=tools, conclusion=conclusion, finish=finish is not False,
        finish_tool=finish.model_dump(mode="json") if isinstance(finish, FinishTool) else None,
        tool_permissions=merge_permissions(cfg.tool_policy, strategy.tool_permissions if strategy else {},
                                           body.tool_permissions),
        max_turns=limits["max_turns"] or profile.max_turns,
        max_total_tokens=limits["max_total_tokens"], max_cost_usd=limits["max_cost_usd"],
        context_window=limits["context_window"] or 200_000,
        compaction_at_pct=limits["compaction_at_pct"] or profile.compaction_at_pct,
        actor=body.strategy.actor, expectation=body.strategy.expectation,
        strategy=strategy.name if strategy else None, subagent_depth=depth, metadata=body.metadata,
        executor_agent=body.executor.agent if body.executor else None,
        user_id=body.user_id, workspace_id=header_value(body.metadata.get("workspace_id")),
    )


def input_messages(body: StartRun) -> list[Message]:
    """StartRun `input` as history messages (a string is one user message)."""
    if isinstance(body.input, str):
        return [{"role": "user", "content": text_to_content(body.input)}]
    return [{"role": m.role, "content": text_to_content(m.content)} for m in body.input]


def lineage(config: RunConfig) -> SubagentLineage:
    """`run.started` of a child run names its parent (loopwire's additions, docs/protocol.md)."""
    if config.subagent_depth == 0:
        return {}
    return {"parent_session_id": subagent.parent_of(config.metadata),
            "parent_tool_use_id": config.metadata.get(subagent.PARENT_TOOL_USE),
            "subagent_depth": config.subagent_depth}
