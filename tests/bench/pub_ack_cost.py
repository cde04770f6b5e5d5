"""What a JetStream publish and its PubAck cost the client, nats-py's way and the bus's
(shared/runtime/pub_acks.py), on one nats-server on loopback.

    .venv/bin/python -m tests.bench.pub_ack_cost [--messages 12000]

Two shapes, each way in turn, twice: six events written before their PubAcks are awaited
together (`publish_async`, a tool-turn's events), and one 1.5 KB work message at a time,
its PubAck awaited before the next (`publish`, a hop's work). Printed: the client
process's CPU per message.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import nats
import orjson
from nats.js.api import StreamConfig

from loopwire.shared.runtime.pub_acks import PubAcks

from .layouts import start_servers

EVENT = orjson.dumps({"v": 1, "kind": "tool.call", "session_id": "s", "seq": 5, "fields": {"x": "y" * 100}})
WORK = orjson.dumps({"v": 1, "kind": "memory.assemble", "session_id": "s", "extra": "y" * 1500})


async def measure(nats_url: str, messages: int) -> None:
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name="COST", subjects=["cost.>"]))
    acks = PubAcks(nc, timeout_s=2.0)

    async def events_nats_py(n: int) -> None:
        await asyncio.gather(*[await js.publish_async("cost.e", EVENT, headers={"Nats-Msg-Id": f"a{n}.{i}"})
                               for i in range(6)])

    async def events_bus(n: int) -> None:
        await asyncio.gather(*[await acks.publish("cost.e", EVENT, {"Nats-Msg-Id": f"b{n}.{i}"}) for i in range(6)])

    async def work_nats_py(n: int) -> None:
        await js.publish("cost.w", WORK, headers={"Nats-Msg-Id": f"c{n}"})

    async def work_bus(n: int) -> None:
        await (await acks.publish("cost.w", WORK, {"Nats-Msg-Id": f"d{n}"}))

    shapes = [("six events", 6, events_nats_py, events_bus), ("one work message", 1, work_nats_py, work_bus)]
    for label, per_call, nats_py, bus in shapes:
        for _ in range(2):
            for way, publish in (("nats-py", nats_py), ("the bus", bus)):
                started = time.process_time()
                for n in range(messages // per_call):
                    await publish(n + int(started * 1e6))
                spent = time.process_time() - started
                print(f"{label}, {way}: {1e6 * spent / messages:.1f} µs of client CPU per message", flush=True)
    await nc.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=12000)
    args = parser.parse_args()
    servers = start_servers(sync_always=False)
    try:
        asyncio.run(measure(servers.nats_url, args.messages))
    finally:
        servers.stop()


if __name__ == "__main__":
    main()
