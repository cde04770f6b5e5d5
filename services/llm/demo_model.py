"""loopwire's offline demo model: deterministic answers without an API.

`DemoModel` answers what `LOOPWIRE_LLM_PROVIDER=scripted` (or no API key) gives a user
of `loopwire up`: it calls a `calculator` tool for an arithmetic question, reads tool
results back, and otherwise quotes the prompt. A bench run (`bench:N` with the `noop`
tool offered) it hands to `BenchModel` (bench_model.py), so the same provider setting
selects it.
"""

from __future__ import annotations

import re

from loopwire.shared.contract.messages import ContentBlock, text_of

from .bench_model import BenchModel, bench_target
from .model import Model
from .model_call import ModelRequest, ModelResponse
from .model_events import Finished, ModelStream
from .offline_reply import estimate_usage, reply_content, stable_id, stream_text

_EXPR_RUN = re.compile(r"[0-9.+\-*/()^%\s]+")
_HAS_OPERATION = re.compile(r"\d\s*[-+*/^%]\s*[\d(]")


def find_expression(text: str) -> str | None:
    """The first arithmetic expression in `text` (`What is 15 * 26 + 5?` -> `15 * 26 + 5`)."""
    text = text.replace("×", "*").replace("÷", "/")
    for match in _EXPR_RUN.finditer(text):
        candidate = match.group().strip().rstrip(".").strip()
        if _HAS_OPERATION.search(candidate):
            return candidate
    return None


class DemoModel(Model):
    """Deterministic answers without an API, good enough to show the loop working. Its
    replies name it (`loopwire-demo`): it is not the model asked for and has no price."""

    name = "demo"
    model_id = "loopwire-demo"

    async def stream(self, request: ModelRequest) -> ModelStream:
        if bench_target(request) is not None:  # `make bench` (bench_model.py)
            async for event in _BENCH.stream(request):
                yield event
            return
        last = request.messages[-1] if request.messages else {"role": "user", "content": ""}
        content = last.get("content", "")
        results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"] \
            if isinstance(content, list) else []
        tool_uses: list[ContentBlock] = []
        text: str | None
        if results:
            text = self._answer_results(results)
        else:
            prompt = text_of(content).strip()
            expression = find_expression(prompt) if "calculator" in request.tool_names() else None
            if expression is not None:
                text = f"Let me calculate {expression}."
                tool_uses = [{"name": "calculator", "input": {"expression": expression}}]
            else:
                quoted = prompt if len(prompt) <= 200 else prompt[:197] + "..."
                text = (f'You said: "{quoted}". I am loopwire\'s offline demo model; '
                        "set ANTHROPIC_API_KEY to talk to Claude.")
        async for delta in stream_text(text):
            yield delta
        blocks = reply_content(request, text, tool_uses)
        yield Finished(ModelResponse(message={"role": "assistant", "content": blocks},
                                     stop_reason="tool_use" if tool_uses else "end_turn", model=self.model_id,
                                     usage=estimate_usage(request, blocks),
                                     response_id=stable_id(request, "msg").replace("toolu_", "msg_demo_")))

    @staticmethod
    def _answer_results(results: list[ContentBlock]) -> str:
        parts = []
        for block in results:
            value = text_of(block.get("content", "")).strip().rstrip(".")
            if block.get("is_error"):
                parts.append(f"the tool reported an error: {value}")
            else:
                parts.append(value)
        if len(parts) == 1:
            if results[0].get("is_error"):
                return f"Sorry, {parts[0]}."
            return f"The result is {parts[0]}."
        return "The results are: " + "; ".join(parts) + "."


_BENCH = BenchModel()
