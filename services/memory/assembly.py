"""Context assembly: the stored history, the run's tools, the session's memory and this
generation's notes, turned into one Messages API request.

Pure functions; the service reads Redis, the context guard (context_guard.py) fits the
messages under the window, and these put the request together.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loopwire.shared.contract.envelopes import AssembleContext, Generate, ToolSpec, Usage
from loopwire.shared.contract.messages import Message

if TYPE_CHECKING:
    from .history_memo import HistoryMemo


def normalised_one(message: Message) -> Message | None:
    """`message` as the request carries it on its own: its content a list of blocks; None
    when it has none (dropped)."""
    content = message.get("content")
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    if not content:
        return None
    return {"role": message["role"], "content": list(content)}


def normalise_messages(history: list[Message], memo: HistoryMemo | None = None) -> list[Message]:
    """Merge consecutive messages of one role (e.g. synthetic tool results followed by a
    follow-up) and drop empty ones, so the request keeps the API's alternation rule.
    `memo`: the messages it handed out come with their normalised form made already (a
    message that is not merged is that very form)."""
    out: list[Message] = []
    for message in history:
        entry = memo.normal(message) if memo is not None else None
        normal = entry.normal if entry is not None else normalised_one(message)
        if normal is None:
            continue
        if out and out[-1]["role"] == normal["role"]:
            out[-1] = {"role": normal["role"], "content": [*out[-1]["content"], *normal["content"]]}
        else:
            out.append(normal)
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


def offered_tools(env: AssembleContext, catalog: dict[str, ToolSpec]) -> list[ToolSpec]:
    return select_tools(catalog, env.tools, env.extra_tools) if env.offer_tools else []


def with_sections(system: str | None, sections: list[str]) -> str | None:
    """The run's system prompt followed by the memory sections (observations and
    reflections, hydrated per generation)."""
    parts = [p for p in [system, *sections] if p]
    return "\n\n".join(parts) if parts else None


def system_prompt(system: str | None, notes: list[str]) -> str | None:
    """Ephemeral notes ride on the system prompt of this one generation; they are never
    stored in the history."""
    if not notes:
        return system
    reminder = "\n".join(f"<system-reminder>{n}</system-reminder>" for n in notes)
    return f"{system}\n\n{reminder}" if system else reminder


def build_generate(env: AssembleContext, messages: list[Message], tools: list[ToolSpec],
                   *, system: str | None, extra_usage: Usage | None = None, no_refs: bool = False,
                   stable_system: str | None = None, notes: list[str] | None = None,
                   input_tokens: int | None = None) -> Generate:
    """The llm service's request. `messages` are already normalised (and compacted);
    `system` already carries the memory sections and every note; `no_refs`: they hold no
    content by reference (their tally found none). `stable_system` and `notes`: `system`
    apart, for the prompt cache (an agent's step has none)."""
    cached = env.prompt_cache == "auto" and env.executor is None
    return Generate(
        session_id=env.session_id, run_id=env.run_id, step_id=env.step_id, turn=env.turn, trace=env.trace,
        models=env.models, system=system, messages=messages, tools=tools, max_tokens=env.max_tokens,
        temperature=env.temperature, extra_usage=extra_usage,
        extra_model=env.memory_model if extra_usage is not None else None, executor=env.executor,
        result_to=env.result_to, no_refs=no_refs, input_tokens=input_tokens or None,
        prompt_cache="auto" if cached else "off", prompt_cache_ttl=env.prompt_cache_ttl,
        stable_system=stable_system if cached else None,
        notes=list(notes or []) if cached else [],
    )
