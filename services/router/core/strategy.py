"""Strategy configs, keyed by (actor, expectation).

A strategy config tells a run who it is and how it works: `role`, `guidelines`,
`objective` (composed into the system prompt, before the run's own `system`), the
allowed `tools`, `tool_permissions` and `limits`, and whether its runs are asked for a
conclusion (`conclusion`, true unless set false). StartRun `strategy: {"actor",
"expectation"}` selects one.

Sources, both keyed by the pair each entry declares (read by the shell,
shell/strategy_store.py; this module parses, indexes and resolves them):

- a file, `LOOPWIRE_STRATEGY_FILE` (JSON or YAML): a list of configs, or `{"strategies":
  [...]}`. Two entries for one pair in the file is an error (the file is rejected);
- Redis, the hash keys.STRATEGIES (actors defined at run time): field = any name (e.g.
  `ops/triage`), value = one config as JSON. It is the fallback: a pair the file defines
  is the file's (a static config is what the operator deployed and reviewed, so a
  run-time entry may add pairs but never replace one); two Redis entries for one pair:
  the first field in sorted order wins (deterministic) and the other is logged.

Resolution is exact and deterministic (`resolve`):

1. `(actor, expectation)` exactly, when the run names an expectation;
2. else `(actor, None)`: the actor's default entry (one that declares no expectation);
3. else none: the profile's defaults.

An entry for `(actor, another expectation)` is never used: a first-match-by-actor lookup
would hand a run the config written for another expectation (its prompt and tools).

What the run gets: `system` is appended after the composed prompt; the config's `tools`
and `tool_permissions` are a floor the run may only make stricter (tool_policy.py: its
`tools` narrow the config's, per tool the strictest permission applies, the operator's
LOOPWIRE_TOOL_POLICY included); `limits` are merged field by field with the run's values
on top.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from loopwire.shared.contract import keys
from loopwire.shared.contract.protocol import FinishTool, Limits, Permission

log = logging.getLogger("loopwire.router.strategy")


Pair = tuple[str, str | None]


class StrategyConfig(BaseModel):
    model_config = ConfigDict(extra="ignore")

    actor: str
    expectation: str | None = None
    role: str | None = None
    guidelines: list[str] = Field(default_factory=list)
    objective: str | None = None
    tools: list[str] | None = None
    tool_permissions: dict[str, Permission] = Field(default_factory=dict)
    limits: Limits = Field(default_factory=Limits)
    finish: bool | FinishTool | None = None
    """Its runs' finish tool, as StartRun `finish` says it (which wins when given): `false`
    leaves it out, an object is the application's own under the reserved name."""
    conclusion: bool = True
    """Its runs are asked for a conclusion: where the finish tool is offered, the prompt's
    guidelines end with the tool's guideline, and a run that answers in text instead
    concludes with the technical summary of its answer (finish.py `stopped_conclusion`)."""

    @property
    def pair(self) -> Pair:
        return (self.actor, self.expectation)

    @property
    def name(self) -> str:
        return f"{self.actor}/{self.expectation}" if self.expectation else self.actor

    def system_prompt(self, run_system: str | None, more_guidelines: tuple[str, ...] = ()) -> str | None:
        """role, objective, guidelines (the config's, then `more_guidelines`), then the
        run's own system prompt."""
        parts = []
        if self.role:
            parts.append(self.role)
        if self.objective:
            parts.append(f"Objective: {self.objective}")
        guidelines = [*self.guidelines, *more_guidelines]
        if guidelines:
            parts.append("Guidelines:\n" + "\n".join(f"- {g}" for g in guidelines))
        if run_system:
            parts.append(run_system)
        return "\n\n".join(parts) if parts else None


def parse_entries(raw: Any, source: str) -> list[StrategyConfig]:
    items = raw.get("strategies", []) if isinstance(raw, dict) else raw
    if not isinstance(items, list):
        raise ValueError(f"{source}: expected a list of strategy configs or {{'strategies': [...]}}")
    entries = [StrategyConfig.model_validate(item) for item in items]
    seen: set[Pair] = set()
    for entry in entries:
        if entry.pair in seen:
            raise ValueError(f"{source}: two strategy configs for actor {entry.actor!r}, "
                             f"expectation {entry.expectation!r}")
        seen.add(entry.pair)
    return entries


def index(file_entries: list[StrategyConfig], redis_entries: dict[str, str | bytes]) -> dict[Pair, StrategyConfig]:
    """Every config by its pair: the file's, then Redis's for the pairs the file does not
    define (fields in sorted order)."""
    table: dict[Pair, StrategyConfig] = {e.pair: e for e in file_entries}
    from_redis: set[Pair] = set()
    for field_name in sorted(redis_entries, key=lambda f: f.decode() if isinstance(f, bytes) else f):
        try:
            entry = StrategyConfig.model_validate(json.loads(redis_entries[field_name]))
        except (ValueError, ValidationError) as exc:
            log.warning("strategy %r in %s ignored: %s", field_name, keys.STRATEGIES, exc)
            continue
        if entry.pair in from_redis or entry.pair in table:
            where = "another field" if entry.pair in from_redis else "LOOPWIRE_STRATEGY_FILE"
            log.warning("strategy %r in %s ignored: %s already defines %s", field_name, keys.STRATEGIES, where,
                        entry.name)
            continue
        from_redis.add(entry.pair)
        table[entry.pair] = entry
    return table


def resolve(table: dict[Pair, StrategyConfig], actor: str | None, expectation: str | None) -> StrategyConfig | None:
    """Exactly (actor, expectation), else the actor's default, else None."""
    if actor is None:
        return None
    if expectation is not None and (actor, expectation) in table:
        return table[(actor, expectation)]
    return table.get((actor, None))
