"""The strategy loop, the agentic profiles' template:

    interpret → validate → [preview] → execute → summarize → loop or done

How each step maps onto the router (one transition of the pure core per arrow that
waits for another service or a human):

| step | where | what |
|---|---|---|
| interpret | the profile's stages (stages.py) | the finished generation: the finish tool is intercepted first (finish.py), then loop detection, vacuous answers, the commitment gate, the plan phases (planning.py), and the routing table decides: tools, again, or done |
| validate | `validate` here (called by `gate`): the plan gate | every call of the batch is checked before anything runs: offered now (the run's `tools`, the phase's reserved tools), not denied by `tool_permissions`, and its input against the tool's JSON Schema (the catalog's, read by the shell and passed in with the result). A rejected call never runs: the model gets an error result with the reason |
| preview | `gate` here (validate, then the preview), approval.py | calls whose permission is `approve` (every runnable call in turn_by_turn) wait for an approval checkpoint; a proposal without calls too (turn_by_turn) |
| execute | the tools service | the batch as one ExecuteTools step (rejected and denied calls marked `denied`, reserved calls answered by the core itself) |
| summarize | tool_batches.py (`after_batch`, the progress note), planning.py | the results go back in one user message; the next generation gets the progress reminder (and the plan's status) |
| loop or done | routing / the finish tool / limits | generate again, or end the run |
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import orjson

from loopwire.shared.contract.argument_schema import ArgumentValidator
from loopwire.shared.contract.envelopes import ToolSpec
from loopwire.shared.contract.messages import ContentBlock
from loopwire.shared.contract.run_state import RunState
from loopwire.shared.runtime.lru import LruCache

from .finish import FINISH_SPEC
from .planning import UPDATE_PLAN_SPEC

if TYPE_CHECKING:
    from .profiles import Profile

SCHEMA_PROBLEM_CHARS = 300


@dataclass(frozen=True)
class Offer:
    """What one generation offers the model (AssembleContext.tools/offer_tools/extra_tools)."""

    tools: list[str] | None
    """Names of the tools service's tools (None: every known tool; []: none of them)."""
    offer: bool
    extra: list[ToolSpec] = field(default_factory=list)
    """The reserved tools the core answers itself (finish, update_plan)."""
    active: list[str] = field(default_factory=list)
    """The tools the generation may use (`active_tools`; RunState.tools_active)."""

    @property
    def reserved(self) -> set[str]:
        return {t.name for t in self.extra}


def offer(run: RunState, profile: Profile) -> Offer:
    """The tools of the run's next generation, by profile, phase and convergence, with
    the ones it may use."""
    now = _offered(run, profile)
    return replace(now, active=active_tools(run, now))


def _offered(run: RunState, profile: Profile) -> Offer:
    tools = run.config.tools
    if not profile.offers_tools or tools == []:
        return Offer(tools=tools, offer=False)
    finish = [finish_spec(run)] if profile.offers_finish and run.config.finish else []
    if run.limits.converging is not None:
        if run.limits.converging == "budget_exhausted" and finish:
            return Offer(tools=[], offer=True, extra=finish)  # only the finish tool: conclude now
        return Offer(tools=tools, offer=False)
    if profile.planned:
        if run.profile_phase == "plan":
            return Offer(tools=[], offer=True, extra=[UPDATE_PLAN_SPEC])
        if run.profile_phase == "execute":
            return Offer(tools=tools, offer=True, extra=[UPDATE_PLAN_SPEC, *finish])
    return Offer(tools=tools, offer=True, extra=finish)


def known_tools(tools: list[str] | None, catalog: list[str] | None) -> list[str] | None:
    """The run's `tools` the catalog holds (all of the catalog's when it names none); None
    when the catalog was not read."""
    if catalog is None:
        return None
    return list(catalog) if tools is None else [n for n in tools if n in catalog]


def active_tools(run: RunState, now: Offer) -> list[str]:
    """The tools a generation with offer `now` may use: the run's tools the catalog knew
    at the start (discovery), less those its `tool_permissions` deny (policy), then the
    reserved tools of its phase (the finish tool, update_plan)."""
    if not now.offer:
        names: list[str] = []
    elif now.tools is None:
        names = list(run.tools.known or [])
    else:
        names = [n for n in now.tools if run.tools.known is None or n in run.tools.known]
    denied = {n for n, p in run.config.tool_permissions.items() if p == "deny"}
    return list(dict.fromkeys([n for n in names if n not in denied] + [t.name for t in now.extra]))


def finish_offered(run: RunState, profile: Profile) -> bool:
    """Whether the run's generations offer the finish tool (also its converging one)."""
    return profile.offers_finish and profile.offers_tools and run.config.tools != [] and run.config.finish


def finish_spec(run: RunState) -> ToolSpec:
    """The finish tool the run offers: the application's own (StartRun or strategy
    `finish`) under the reserved name, else the built-in one."""
    own = run.config.finish_tool
    if own is None:
        return FINISH_SPEC
    return ToolSpec(name=FINISH_SPEC.name, description=own["description"], input_schema=own["input_schema"])


def schema_problem(schema: dict[str, Any], value: Any,
                   validators: LruCache[bytes, Any] | None = None) -> str | None:
    """The most relevant JSON Schema violation of `value`, or None (also for a schema that
    cannot be used: the tools service checks again before the call). `validators`: the
    compiled validators by schema (its canonical JSON), `CoreConfig.schema_validators`;
    None builds one for this check alone."""
    try:
        key = orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)
        validator = validators.get(key) if validators is not None else None
        if validator is None:
            validator = ArgumentValidator.deferred(schema, _jsonschema_validator)
            if validators is not None:
                validators.put(key, validator)
        if validator.is_valid(value):  # the common case, without the search for the best error
            return None
        from jsonschema.exceptions import best_match

        error = best_match(validator.iter_errors(value))
    except Exception:
        return None
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return (f"{where}: {error.message}" if where else error.message)[:SCHEMA_PROBLEM_CHARS]


def _jsonschema_validator(schema: dict[str, Any]) -> Any:
    # jsonschema loads with the first call the compiled check cannot answer, not with the
    # router (its idle memory, and after a load of flat schemas).
    from jsonschema.validators import validator_for

    return validator_for(schema)(schema)


@dataclass(frozen=True)
class Gate:
    """The plan gate's verdict on a batch, and its preview."""

    rejected: dict[str, str]
    """tool_use id -> why the call must not run."""
    reserved: list[ContentBlock]
    """The calls the core answers itself (reserved tools offered now)."""
    ask: list[str]
    """The ids of the calls that wait for a human decision (empty: the batch runs)."""


def gate(run: RunState, profile: Profile, calls: list[ContentBlock], *,
         schemas: dict[str, dict[str, Any]] | None, validators: LruCache[bytes, Any] | None) -> Gate:
    """validate, then preview: the batch's verdict in one step."""
    rejected, reserved = validate(run, profile, calls, schemas=schemas, validators=validators)
    skip = set(rejected) | {c["id"] for c in reserved}
    ask = [c["id"] for c in calls if c["id"] not in skip
           and (profile.reviews_every_turn or run.config.tool_permissions.get(c.get("name", ""), "auto") == "approve")]
    return Gate(rejected=rejected, reserved=reserved, ask=ask)


def validate(run: RunState, profile: Profile, calls: list[ContentBlock], *,
             schemas: dict[str, dict[str, Any]] | None, validators: LruCache[bytes, Any] | None = None
             ) -> tuple[dict[str, str], list[ContentBlock]]:
    """The plan gate: `(rejected, reserved)`: tool_use id -> why it must not run, and the
    calls the core answers itself (reserved tools offered now)."""
    now = offer(run, profile)
    reserved_names = now.reserved
    allowed = now.tools
    rejected: dict[str, str] = {}
    reserved: list[ContentBlock] = []
    for c in calls:
        name = c.get("name", "")
        permission = run.config.tool_permissions.get(name, "auto")
        if name in reserved_names:
            reserved.append(c)
        elif allowed is not None and name not in allowed:
            where = "in the plan phase" if run.profile_phase == "plan" else "in this run"
            rejected[c["id"]] = f"tool '{name}' is not available {where}"
        elif permission == "deny":
            rejected[c["id"]] = f"tool '{name}' is denied by the run's tool_permissions"
        elif schemas is not None and name in schemas:
            problem = schema_problem(schemas[name], c.get("input") or {}, validators)
            if problem is not None:
                rejected[c["id"]] = f"invalid input for tool {name}: {problem}"
    return rejected, reserved
