"""A run, start to end, with nothing but nats-py (the README's first example).

    python examples/plain_nats_client.py "What is 17 * 23 + 4?" [--nats-url nats://127.0.0.1:4222]
"""

import argparse
import asyncio
import json
import os
import uuid

import nats


async def main(url: str, prompt: str) -> None:
    nc = await nats.connect(servers=url.split(","))  # one server, or a cluster's comma-separated
    sid = f"example-{uuid.uuid4().hex[:8]}"
    done = asyncio.Event()

    async def on_event(msg):
        event = json.loads(msg.data)
        if event["kind"] == "text.delta":
            print(event["text"], end="", flush=True)
        elif event["kind"] == "tool.call":
            print(f"\n[tool] {event['name']} {json.dumps(event['input'])}")
        elif event["kind"] == "run.ended":
            print(f"\n[{event['status']}] {event['final_text']!r} usage={event['usage']}")
            done.set()

    await nc.subscribe(f"loopwire.out.{sid}.>", cb=on_event)        # events
    ack = await nc.request(f"loopwire.in.{sid}.start",               # durable ingress
                           json.dumps({"v": 1, "input": prompt}).encode(),
                           headers={"Nats-Msg-Id": uuid.uuid4().hex}, timeout=5)
    print("accepted:", json.loads(ack.data))                        # JetStream PubAck
    await asyncio.wait_for(done.wait(), 120)
    reply = await nc.request("loopwire.api.session.get", json.dumps({"session_id": sid}).encode(), timeout=5)
    print("session status:", json.loads(reply.data)["status"])
    await nc.drain()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("prompt")
    parser.add_argument("--nats-url", default=os.environ.get("LOOPWIRE_NATS_URL", "nats://127.0.0.1:4222"))
    args = parser.parse_args()
    asyncio.run(main(args.nats_url, args.prompt))
