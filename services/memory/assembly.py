"""Context assembly: the stored history, the run's tools and this generation's notes,
turned into one Messages API request.

Pure functions; the service reads Redis and calls these. Compaction under a token budget
and the observation/reflection memory hook in here (docs/architecture.md).
"""

from __future__ import annotations

from typing import Any

from loopwire.shared.envelopes import AssembleContext, Generate, ToolSpec


def normalise_messages(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Merge consecutive messages of one role (e.g. synthetic tool results followed by a
    follow-up) and drop empty ones, so the request keeps the API's alternation rule."""
    out: list[dict[str, Any]] = []
    for message in history:
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if not content:
            continue
        if out and out[-1]["role"] == message["role"]:
            out[-1] = {"role": message["role"], "content": [*out[-1]["content"], *content]}
        else:
            out.append({"role": message["role"], "content": list(content)})
    return out


def select_tools(catalog: dict[str, ToolSpec], allowed: list[str] | None,
                 extra: list[ToolSpec]) -> list[ToolSpec]:
    """The run's tools in the run's order (or the catalog's, sorted, when the run allows
    every tool), plus the tools the router adds itself."""
    if allowed is None:
        chosen = [catalog[name] for name in sorted(catalog)]
    else:
        chosen = [catalog[name] for name in allowed if name in catalog]
    names = {t.name for t in chosen}
    return chosen + [t for t in extra if t.name not in names]


def system_prompt(system: str | None, notes: list[str]) -> str | None:
    """Ephemeral notes ride on the system prompt of this one generation; they are never
    stored in the history."""
    if not notes:
        return system
    reminder = "\n".join(f"<system-reminder>{n}</system-reminder>" for n in notes)
    return f"{system}\n\n{reminder}" if system else reminder


def build_generate(env: AssembleContext, history: list[dict[str, Any]],
                   catalog: dict[str, ToolSpec]) -> Generate:
    tools = select_tools(catalog, env.tools, env.extra_tools) if env.offer_tools else []
    return Generate(
        session_id=env.session_id, run_id=env.run_id, step_id=env.step_id, turn=env.turn, trace=env.trace,
        models=env.models, system=system_prompt(env.system, env.ephemeral_notes),
        messages=normalise_messages(history), tools=tools, max_tokens=env.max_tokens,
        temperature=env.temperature,
    )
