"""What the agents run as one process per prompt have in common (`codex exec`, `opencode
run`): the prompt as text on stdin, the agent's tools kept from it by the run's
permissions, and a steer that stops the process and continues the agent's session with
the new message (neither takes input while it runs).
"""

from __future__ import annotations

import json
import logging
from abc import abstractmethod
from collections.abc import AsyncIterator
from typing import Any

from loopwire.shared.contract.messages import ContentBlock

from .agent_process import AgentProcess
from .base import ExecutorEvent, ExecutorRun, ExecutorTask, Finished, PermissionRequest

log = logging.getLogger("loopwire.llm.executors")

IMAGE_NOTE = "[an image was attached here; this agent is given text only]"


def prompt_text(blocks: list[ContentBlock]) -> str:
    """The prompt as these agents take it on stdin: its text; an image block is named."""
    parts = []
    for block in blocks:
        if block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        elif block.get("type") == "image":
            parts.append(IMAGE_NOTE)
    return "\n\n".join(p for p in parts if p)


def kept_from_agent(task: ExecutorTask) -> set[str]:
    """The agent's own tools the run denies, or wants approved: these CLIs cannot wait for
    a person's decision, so `approve` keeps the tool from the agent too. (Loopwire's own
    tools are governed where they are served.)"""
    loopwire = {t.name for t in task.tools}
    return {n for n, p in task.permissions.items() if p in ("deny", "approve") and n not in loopwire}


async def start_with_prompt(process: AgentProcess, prompt: list[ContentBlock]) -> None:
    await process.start()
    await process.write(prompt_text(prompt).encode() + b"\n")
    process.close_stdin()


class OneShotRun(ExecutorRun):
    """One step of such an agent: a process per prompt, its JSON lines as events."""

    agent = "the agent"

    def __init__(self, task: ExecutorTask) -> None:
        self.task = task
        self.process: AgentProcess | None = None
        self._steers: list[list[ContentBlock]] = []
        self._cancelled = False

    @abstractmethod
    async def spawn(self, prompt: list[ContentBlock], resume: str | None) -> AgentProcess:
        """A started process given `prompt`, continuing the agent's session `resume`."""

    @abstractmethod
    def feed(self, line: dict[str, Any]) -> list[ExecutorEvent]:
        """The events of one JSON line of the agent's output."""

    @abstractmethod
    def session(self) -> str | None:
        """The agent's session, once it named it."""

    @abstractmethod
    def ended(self, process: AgentProcess, finished: Finished | None) -> Finished:
        """The step's end once the process ended (not for a steer): `finished` is what the
        agent reported as its end, if anything; raises ExecutorFailed when it gave no
        answer."""

    def stop_after(self, event: ExecutorEvent) -> Finished | None:
        """A limit the agent itself does not keep, reached with `event`: the step's end."""
        return None

    async def events(self) -> AsyncIterator[ExecutorEvent]:
        while self.process is not None:
            process = self.process
            finished = stopped = None
            async for raw in process.lines():
                try:
                    line = json.loads(raw)
                except json.JSONDecodeError:  # notices of the agent's own, in plain text
                    log.info("%s: %.300s", self.agent, raw.decode("utf-8", "replace").strip())
                    continue
                for event in self.feed(line) if isinstance(line, dict) else []:
                    if isinstance(event, Finished):
                        finished = event
                        continue
                    yield event
                    stopped = self.stop_after(event)
                    if stopped is not None:
                        break
                if stopped is not None:
                    await process.stop()
                    finished = stopped
                    break
            await process.wait(5.0)
            if stopped is None and self._steers and not self._cancelled:
                await process.stop()
                steer = self._steers.pop(0)
                session = self.session()  # none yet: a new session, given the step's prompt too
                self.process = await self.spawn(steer if session else [*self.task.prompt, *steer],
                                                session or self.task.resume)
                continue
            if self._cancelled:
                return
            yield self.ended(process, finished)
            return

    async def respond(self, request: PermissionRequest, allow: bool, message: str | None = None) -> None:
        """These CLIs ask loopwire for no permission (see `kept_from_agent`)."""

    async def steer(self, content: list[ContentBlock]) -> None:
        self._steers.append(content)
        if self.process is not None:
            await self.process.stop()

    async def cancel(self) -> None:
        self._cancelled = True
        if self.process is not None:
            await self.process.stop()

    async def aclose(self) -> None:
        await self.cancel()
