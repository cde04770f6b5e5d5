"""The approval flow with `loopwire.Client`: the run may use `weather` only after a
person says yes. Each `approval.requested` shows the calls it is about; `--yes` approves
without asking.

    python examples/tool_provider.py &      # the weather tool
    python examples/approval_flow.py "What's the weather in Paris?" [--yes] [--nats-url URL]
"""

import argparse
import asyncio
import os

import loopwire
from loopwire.shared.contract.events import ApprovalRequested, Event, TextDelta, ToolResultEvent


async def main(url: str, prompt: str, yes: bool) -> int:
    async with await loopwire.Client.connect(url) as lw:

        def show(event: Event) -> None:
            if isinstance(event, TextDelta):
                print(event.text, end="", flush=True)
            elif isinstance(event, ToolResultEvent):
                print(f"\n[result] {event.content}")

        async def approve(event: ApprovalRequested) -> bool:
            for call in event.tool_calls or []:
                print(f"\napproval requested: {call['name']} {call['input']}")
            if yes:
                print("approved (--yes)")
                return True
            answer = await asyncio.to_thread(input, "approve? [y/N] ")
            return answer.strip().lower() in ("y", "yes")

        ended = await lw.run(prompt, tools=["weather"], tool_permissions={"weather": "approve"},
                             on_event=show, approve=approve)
        print(f"\n[{ended.status}] {ended.final_text!r} cost_usd={ended.cost_usd}")
        return 0 if ended.status == "completed" else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("prompt")
    parser.add_argument("--yes", action="store_true", help="approve every checkpoint")
    parser.add_argument("--nats-url", default=os.environ.get("LOOPWIRE_NATS_URL", "nats://127.0.0.1:4222"))
    args = parser.parse_args()
    raise SystemExit(asyncio.run(main(args.nats_url, args.prompt, args.yes)))
