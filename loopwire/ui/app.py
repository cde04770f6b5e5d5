"""The session inspector (`loopwire ui`): a small Starlette app over the public contract.

Pages are static HTML with plain JS modules (no build step, loopwire/ui/static/). The
server is a thin translation from HTTP to NATS, through the same client the CLI uses:

    GET  /api/sessions?status=S          loopwire.api.sessions.list
    GET  /api/sessions/{sid}             loopwire.api.session.get
    GET  /api/sessions/{sid}/events      server-sent events: the session's events, each once,
                                         in seq order (stored ones first), then live
    POST /api/sessions/{sid}/{verb}      the durable ingress: message, steer, abort, decision
    POST /api/start                      a StartRun on a new (or named) session
    GET  /api/tools                      loopwire.api.tools.list
    POST /api/sessions/{sid}/fork        loopwire.api.session.fork (`new_session_id`, `at_seq`)
    POST /api/sessions/{sid}/replay      the replay driver (loopwire/replay/) on a fork: its report
    POST /api/sessions/{sid}/delete      loopwire.api.session.delete, when the body's `confirm`
                                         repeats the session id: the receipt
    GET  /api/sessions/{sid}/export      loopwire.api.session.export: one JSON document
    GET  /api/sessions/{sid}/waterfall   the runs' generations and tool calls on a time axis
                                         (waterfall.py, from transcript.get)

A replay's live tools run under the operator's policy, as `loopwire replay` does: the
inspector connects with the operator's settings, and the tools service applies its
policy to the fork's calls like any other.

Writes take JSON bodies only: a cross-site form cannot send `application/json` without
the browser asking first (CORS), so another page cannot approve or abort through it.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import nats.errors
import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from loopwire.client import LoopwireClient
from loopwire.replay import ReplayError, replay_session
from loopwire.shared.contract.subjects import valid_session_id
from loopwire.shared.runtime.pricing import price_table

from .waterfall import waterfall

STATIC = Path(__file__).parent / "static"
VERBS = ("message", "steer", "abort", "decision")
REPLAY_RUN_TIMEOUT_S = 300.0
"""How long each run of a replay started from the page may take (`loopwire replay --timeout`)."""
FORK_ERRORS = {"unknown_session": 404, "session_exists": 409, "invalid_seq": 400}
KEEPALIVE_S = 15.0
"""A comment line this often keeps proxies from closing an idle event stream."""


def error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


def create_app(client: LoopwireClient, prices: Mapping[str, Mapping[str, float]] | None = None) -> Starlette:
    """The inspector's app over a connected client (the caller owns the connection);
    `prices`: the table its waterfall prices at (default: the built-in prices)."""

    async def ask(coro: Any) -> Response:
        try:
            reply = await coro
        except nats.errors.NoRespondersError:
            return error(503, "no_services", "no loopwire service answers this query")
        except nats.errors.TimeoutError:
            return error(504, "timeout", "no reply in time")
        status = 400 if isinstance(reply, dict) and "error" in reply else 200
        return JSONResponse(reply, status_code=status)

    async def sessions(request: Request) -> Response:
        status = request.query_params.get("status") or None
        limit = int(request.query_params.get("limit", "100"))
        return await ask(client.sessions_list(status=status, limit=min(max(limit, 1), 500),
                                              cursor=request.query_params.get("cursor") or None))

    async def session(request: Request) -> Response:
        sid = request.path_params["sid"]
        return await ask(client.session_get(sid))

    async def tools(request: Request) -> Response:
        async def tools_list() -> dict[str, Any]:
            reply = await client.nc.request(client.subjects.tools_list, b"{}", timeout=5.0)
            return dict(orjson.loads(reply.data))
        return await ask(tools_list())

    async def events(request: Request) -> Response:
        sid = request.path_params["sid"]
        # A reconnecting EventSource sends the last id it saw: go on after it, not from 0.
        resume = request.headers.get("last-event-id", "")
        after = max(int(request.query_params.get("after_seq", "0")), int(resume) if resume.isdigit() else 0)
        try:
            follower = await client.follow(sid, after_seq=after)
        except nats.errors.NoRespondersError:
            return error(503, "no_services", "no events stream: no loopwire service ran against this NATS")

        async def stream() -> AsyncIterator[bytes]:
            import asyncio

            async with follower:
                yield b": connected\n\n"
                iterator = follower.__aiter__()
                while True:
                    try:
                        event = await asyncio.wait_for(iterator.__anext__(), KEEPALIVE_S)
                    except TimeoutError:
                        yield b": keep-alive\n\n"
                        continue
                    yield b"id: %d\ndata: %s\n\n" % (event.get("seq", 0), orjson.dumps(event))

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    async def json_body(request: Request) -> dict[str, Any] | Response:
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            return error(415, "json_only", "send the body as application/json")
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError:
            return error(400, "bad_json", "the body is not JSON")
        if not isinstance(body, dict):
            return error(400, "bad_request", "the body must be a JSON object")
        return body

    async def publish(sid: str, verb: str, body: dict[str, Any]) -> Response:
        try:
            ack = await client.publish(sid, verb, {**body, "v": 1}, msg_id=uuid.uuid4().hex)
        except nats.errors.NoRespondersError:
            return error(503, "no_services", "no stream captures the ingress: is loopwire running?")
        except nats.errors.TimeoutError:
            return error(504, "timeout", "no acknowledgement in time")
        return JSONResponse({"session_id": sid, "ack": ack}, status_code=202)

    async def act(request: Request) -> Response:
        sid, verb = request.path_params["sid"], request.path_params["verb"]
        if verb not in VERBS:
            return error(404, "unknown_verb", f"{verb!r} is not one of {', '.join(VERBS)}")
        body = await json_body(request)
        if isinstance(body, Response):
            return body
        return await publish(sid, verb, body)

    async def start(request: Request) -> Response:
        body = await json_body(request)
        if isinstance(body, Response):
            return body
        sid = str(body.pop("session_id", "") or f"ui-{uuid.uuid4().hex[:12]}")
        if not valid_session_id(sid):
            return error(400, "invalid_session_id", "1-128 characters of A-Z a-z 0-9 _ -")
        return await publish(sid, "start", body)

    async def fork(request: Request) -> Response:
        sid = request.path_params["sid"]
        body = await json_body(request)
        if isinstance(body, Response):
            return body
        new = str(body.get("new_session_id") or "")
        at_seq = body.get("at_seq")
        if not valid_session_id(new, tenants="." in new):  # `<tenant>.<sid>`: a tenant's session
            return error(400, "invalid_session_id", "the new id: 1-128 characters of A-Z a-z 0-9 _ -")
        if at_seq is not None and (not isinstance(at_seq, int) or isinstance(at_seq, bool)):
            return error(400, "invalid_seq", "at_seq is an event's seq (an integer)")
        reply = await ask(client.fork(sid, new, at_seq=at_seq))
        if reply.status_code == 400:
            code = orjson.loads(bytes(reply.body))["error"].get("code")
            reply.status_code = FORK_ERRORS.get(code, 400)
        return reply

    async def replay(request: Request) -> Response:
        sid = request.path_params["sid"]
        body = await json_body(request)
        if isinstance(body, Response):
            return body
        tools = body.get("tools") or "recorded"
        if tools not in ("recorded", "live"):
            return error(400, "bad_request", "tools is recorded or live")
        model = str(body.get("model") or "").strip() or None
        system = body.get("system") if isinstance(body.get("system"), str) and body.get("system") else None
        try:
            report = await replay_session(client, sid, model=model, system=system, tools=tools,
                                          run_timeout=REPLAY_RUN_TIMEOUT_S)
        except ReplayError as exc:
            return error(400, "replay_failed", str(exc))
        except nats.errors.NoRespondersError:
            return error(503, "no_services", "no loopwire service answers this query")
        except TimeoutError:
            return error(504, "timeout", f"a run of the replay did not end within {REPLAY_RUN_TIMEOUT_S:g}s")
        return JSONResponse(report.to_dict())

    async def delete(request: Request) -> Response:
        sid = request.path_params["sid"]
        body = await json_body(request)
        if isinstance(body, Response):
            return body
        if body.get("confirm") != sid:
            # The page asks first; a request that does not repeat the id deletes nothing.
            return error(400, "unconfirmed", "a delete names the session again in `confirm`")
        return await ask(client.session_delete(sid))

    async def export(request: Request) -> Response:
        reply = await ask(client.session_export(request.path_params["sid"]))
        if reply.status_code == 200:
            name = request.path_params["sid"].replace(".", "_")
            reply.headers["Content-Disposition"] = f'attachment; filename="{name}.json"'
        return reply

    async def runs_waterfall(request: Request) -> Response:
        sid = request.path_params["sid"]
        try:
            events = await client.transcript(sid)
        except RuntimeError as exc:  # the query's error reply
            return error(404 if "unknown_session" in str(exc) else 400, "transcript", str(exc))
        except nats.errors.NoRespondersError:
            return error(503, "no_services", "no loopwire service answers this query")
        except nats.errors.TimeoutError:
            return error(504, "timeout", "no reply in time")
        return JSONResponse({"session_id": sid, "runs": waterfall(events, prices)})

    def page(name: str) -> Any:
        async def serve(request: Request) -> Response:
            return FileResponse(STATIC / name, headers={"Cache-Control": "no-store"})
        return serve

    routes = [
        Route("/", page("index.html")),
        Route("/session/{sid}", page("session.html")),
        Route("/api/sessions", sessions),
        Route("/api/sessions/{sid}", session),
        Route("/api/sessions/{sid}/events", events),
        Route("/api/sessions/{sid}/waterfall", runs_waterfall),
        Route("/api/sessions/{sid}/fork", fork, methods=["POST"]),
        Route("/api/sessions/{sid}/replay", replay, methods=["POST"]),
        Route("/api/sessions/{sid}/delete", delete, methods=["POST"]),
        Route("/api/sessions/{sid}/export", export),
        Route("/api/sessions/{sid}/{verb}", act, methods=["POST"]),
        Route("/api/start", start, methods=["POST"]),
        Route("/api/tools", tools),
        Mount("/static", StaticFiles(directory=STATIC)),
    ]
    return Starlette(routes=routes)


async def serve(settings: Any, port: int | None = None, host: str | None = None) -> None:
    """Connect as the operator configured it and serve until interrupted."""
    import uvicorn

    from loopwire.commands.connection import connect_nats

    nc = await connect_nats(settings)
    client = LoopwireClient(nc, settings.subject_prefix, own_connection=True, tenant=settings.tenant)
    app = create_app(client, price_table(settings.prices))
    config = uvicorn.Config(app, host=host or settings.ui_host, port=port or settings.ui_port,
                            log_level="warning", lifespan="off")
    try:
        await uvicorn.Server(config).serve()
    finally:
        with contextlib.suppress(Exception):
            await client.close()
