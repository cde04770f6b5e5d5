"""A tool provider in Python: the `weather` tool on the NATS services protocol (nats.micro).
The tools service discovers it within seconds and offers it to the model; run several
copies and NATS balances them. Stops on Ctrl-C or SIGTERM.

    python examples/tool_provider.py [--nats-url nats://127.0.0.1:4222]

The endpoint's subject is under `loopwire.tool.`, the only namespace the provider user of
deploy/nats/users.conf may serve. On a secured NATS (docker-compose, the Helm chart) it
connects with that user's credentials: LOOPWIRE_NATS_USER and LOOPWIRE_NATS_PASSWORD
(`loopwire-provider` and the compose stack's LOOPWIRE_NATS_PROVIDER_PASSWORD), or a
credentials file in LOOPWIRE_NATS_CREDS.
"""

import argparse
import asyncio
import json
import os
import signal

import nats
from nats import micro

FORECASTS = {"paris": "Sunny, 21 °C", "london": "Light rain, 14 °C"}


def credentials() -> dict[str, str]:
    """nats.connect's options for the provider user, from the environment (none: no auth)."""
    if creds := os.environ.get("LOOPWIRE_NATS_CREDS"):
        return {"user_credentials": creds}
    if user := os.environ.get("LOOPWIRE_NATS_USER"):
        return {"user": user, "password": os.environ.get("LOOPWIRE_NATS_PASSWORD", "")}
    return {}


async def main(url: str) -> None:
    # one server, or a cluster's comma-separated
    nc = await nats.connect(servers=url.split(","), **credentials())
    svc = await micro.add_service(nc, name="weather", version="1.0.0", description="example weather provider")

    async def weather(req: micro.Request) -> None:
        args = json.loads(req.data)                        # already validated against the schema
        tool_use_id = req.headers.get("Loopwire-Tool-Use-Id")  # the idempotency key of this call
        forecast = FORECASTS.get(args["city"].lower())
        if forecast is None:
            body = {"content": f"No forecast for {args['city']}.", "is_error": True}
        else:
            body = {"content": f"{forecast} in {args['city']}", "is_error": False}
        print(f"weather({args['city']!r}) for call {tool_use_id}", flush=True)
        await req.respond(json.dumps(body).encode())

    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    await svc.add_endpoint(name="weather", subject="loopwire.tool.weather", handler=weather, metadata={
        "loopwire.tool": "weather", "description": "Current weather for a city.",
        "input_schema": json.dumps(schema)})
    print("serving the weather tool; Ctrl-C to stop", flush=True)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await svc.stop()
    await nc.drain()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--nats-url", default=os.environ.get("LOOPWIRE_NATS_URL", "nats://127.0.0.1:4222"))
    asyncio.run(main(parser.parse_args().nats_url))
