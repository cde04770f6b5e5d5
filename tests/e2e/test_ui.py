"""The session inspector (`loopwire ui`) in a real browser: Playwright drives Debian's
chromium (installed by `make test`) against `loopwire ui` and `loopwire up`. Open the
list, start a turn_by_turn run from the form, watch its text stream in, click Approve
on its checkpoint, see it complete; the list shows it, filtered by status. A tool-using
run's page: its waterfall (a bar per generation and per tool call), a replay from the
page (the comparison, side by side, with no tool provider called), and "Fork here" on
its timeline, which lands on the fork's page with its lineage."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from loopwire.client import LoopwireClient
from loopwire.testing import LoopwireContainer, free_port
from tests.e2e.cli_driver import cli_env
from tests.e2e.conftest import ToolProvider, wait_for_tools
from tests.fakes.anthropic_server import FakeAnthropic

pytestmark = pytest.mark.e2e

CHROMIUM = "/usr/bin/chromium"
IMAGES = Path(__file__).resolve().parents[2] / "docs" / "img"
SCREENSHOT = IMAGES / "inspector.png"


@pytest.fixture
def chromium() -> str:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs Debian's chromium (apt-get install chromium)")
    return CHROMIUM


def keep_screenshot(taken: Path, kept: Path = SCREENSHOT) -> None:
    assert taken.stat().st_size > 10_000, "a page, not a blank"
    if os.environ.get("LOOPWIRE_UPDATE_SCREENSHOT"):  # refreshes the README's picture
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(taken, kept)


@pytest.fixture
async def inspector(system: LoopwireContainer) -> AsyncIterator[str]:
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "loopwire.cli", "ui", "--port", str(port), env=cli_env(system.get_nats_url()),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        async with asyncio.timeout(30):
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                except OSError:
                    assert proc.returncode is None, (await proc.stdout.read()).decode()  # type: ignore[union-attr]
                    await asyncio.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 20)


async def test_watch_a_run_stream_and_approve_its_checkpoint(inspector: str, chromium: str, fake: FakeAnthropic,
                                                             tmp_path: Path) -> None:
    from playwright.async_api import async_playwright, expect

    fake.script("*", [{"chunks": ["Roses are red, ", "loops ", "are ", "wired."], "chunk_delay_s": 0.15}])
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = await browser.new_page(viewport={"width": 1280, "height": 900})
        try:
            await page.goto(inspector)
            await expect(page.locator("#sessions")).to_be_visible()
            await page.fill("#start input[name=input]", "Write one line about loopwire.")
            await page.select_option("#profile", "turn_by_turn")
            await page.click("#start button[type=submit]")
            await page.wait_for_url("**/session/ui-*")
            sid = page.url.rsplit("/", 1)[1]

            # the proposal streams in, then waits for a person
            timeline = page.locator("#timeline")
            await expect(timeline).to_contain_text("Roses are red, loops are wired.", timeout=30_000)
            approve = page.locator(".ev.approval button.approve")
            await expect(approve).to_be_visible(timeout=30_000)
            await expect(page.locator("#status")).to_have_text("awaiting_approval", timeout=10_000)
            await expect(page.locator("#position")).to_have_text("review · awaiting_approval", timeout=10_000)
            # the waterfall follows the run live: its first generation is a bar while it waits
            await expect(page.locator(".run-waterfall rect.bar.generation")).to_have_count(1, timeout=10_000)
            await page.screenshot(path=str(tmp_path / "inspector.png"), full_page=True)
            # the list says where it stands too
            listing = await browser.new_page()
            await listing.goto(inspector)
            await expect(listing.locator(f"tr[data-session='{sid}'] td.where")).to_have_text(
                "review · awaiting_approval", timeout=10_000)
            await listing.close()
            await approve.click()
            ended = page.locator(".ev.ended")
            await expect(ended).to_have_attribute("data-status", "completed", timeout=30_000)
            await expect(ended).to_contain_text("Roses are red, loops are wired.")
            await expect(timeline).to_contain_text("phase execute → done")
            await expect(page.locator("#status")).to_have_text("idle", timeout=10_000)
            await expect(page.locator("#position")).to_have_text("", timeout=10_000)

            # the list shows it, with its status, and the filter narrows it
            await page.goto(inspector)
            row = page.locator(f"tr[data-session='{sid}']")
            await expect(row).to_contain_text("idle", timeout=10_000)
            await expect(row).to_contain_text("turn_by_turn")
            await page.select_option("#status-filter", "awaiting_approval")
            await expect(row).to_have_count(0, timeout=10_000)
            await page.select_option("#status-filter", "idle")
            await expect(row).to_have_count(1, timeout=10_000)
        finally:
            await browser.close()
    keep_screenshot(tmp_path / "inspector.png")


async def test_a_tool_run_s_waterfall_replay_and_fork_from_the_timeline(
        inspector: str, chromium: str, system: LoopwireContainer, fake: FakeAnthropic,
        tool_provider: ToolProvider, nc: Any, tmp_path: Path) -> None:
    from playwright.async_api import async_playwright, expect

    await wait_for_tools(nc, {"slow_echo"})
    tool_provider.slow_delay_s = 0.4
    call = {"name": "slow_echo", "input": {"text": "wired"}}
    # the primary model is overloaded: the run falls back to the other one (a mark on the waterfall)
    # (names of this test's own, so the primary's breaker opens for no other test; priced by their prefixes)
    primary, fallback = f"claude-opus-4-5-ui-{uuid.uuid4().hex[:6]}", f"claude-sonnet-4-5-ui-{uuid.uuid4().hex[:6]}"
    fake.fail_next(529, n=None, model=primary)
    fake.script(fallback, [{"tool_use": [call], "delay_s": 0.3}, {"text": "It echoed: wired.", "delay_s": 0.25}])
    # the replay's turns on another model: the same call (answered from the recording), another answer
    fake.script("*", [{"tool_use": [call]}, {"text": "Echo says wired."}])
    sid = f"ui-tools-{uuid.uuid4().hex[:8]}"
    async with await LoopwireClient.connect(system.get_nats_url()) as lw:
        ended = await lw.run(sid, {"input": "Echo 'wired'.", "tools": ["slow_echo"],
                                   "model": {"primary": primary, "fallbacks": [fallback]}}, timeout=60)
    assert ended["status"] == "completed" and len(tool_provider.calls) == 1

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = await browser.new_page(viewport={"width": 1280, "height": 1000})
        try:
            await page.goto(f"{inspector}/session/{sid}")
            # the waterfall: a bar per generation (2 turns) and per tool call (1), with their durations
            chart = page.locator(f".run-waterfall[data-run='{ended['run_id']}']")
            await expect(chart.locator("rect.bar.generation")).to_have_count(2, timeout=15_000)
            await expect(chart.locator("rect.bar.tool")).to_have_count(1)
            await expect(chart.locator("rect.bar.tool")).to_have_attribute("data-name", "slow_echo")
            await expect(chart.locator("table.turns tbody tr")).to_have_count(2)
            await expect(chart.locator(".run-head")).to_contain_text("completed")
            # each turn asked the primary first (its breaker is not open yet) and fell back
            await expect(chart.locator("g.mark.fallback")).to_have_count(2)
            await expect(chart.locator("ul.marks li.fallback").first).to_contain_text(f"fallback {primary} → {fallback}")
            await expect(chart.locator("table.turns tbody")).to_contain_text(fallback)
            await expect(chart.locator("table.turns tbody tr").first).to_contain_text("$0.00")  # at sonnet's price
            tool_title = await chart.locator("rect.bar.tool title").text_content()
            assert tool_title and tool_title.startswith("slow_echo: "), tool_title
            # each bar is as long as its span on the run's axis (the rendered width, after CSS)
            (run,) = (await page.evaluate(f"fetch('/api/sessions/{sid}/waterfall').then((r) => r.json())"))["runs"]
            (tool_span,) = run["tools"]
            assert tool_span["name"] == "slow_echo" and tool_span["duration_ms"] >= 400, tool_span
            # measured in one evaluation that finds the chart itself: the page redraws the waterfall
            # after the events it replays (session.js), and an element found by an earlier step may
            # be detached by then, with a width of 0
            widths = await page.evaluate("""(selector) => {
                const chart = document.querySelector(selector);
                return {
                    tool: chart.querySelector("rect.bar.tool").getBoundingClientRect().width,
                    generations: [...chart.querySelectorAll("rect.bar.generation")].map((b) => b.getBoundingClientRect().width),
                };
            }""", f".run-waterfall[data-run='{ended['run_id']}']")
            scale = widths["tool"] / tool_span["duration_ms"]  # px per ms of the run's axis
            assert abs(scale - 820 / run["duration_ms"]) < 0.01, "the axis spans the whole run (waterfall.js PLOT_W)"
            for turn, width in zip(run["turns"], widths["generations"], strict=True):
                assert abs(width - max(2.0, turn["duration_ms"] * scale)) <= 2, (turn, width, scale)
                assert turn["duration_ms"] >= 250, "the fake model's delay_s (and the primary's 529s) are in its span"
            await expect(page.locator(".ev.ended")).to_have_attribute("data-status", "completed", timeout=10_000)

            # a replay from the page, recorded tools: the comparison, run by run; no tool ran again
            await page.fill("#replay input[name=model]", "claude-haiku-4-5")
            await page.select_option("#replay select[name=tools]", "recorded")
            await page.click("#replay button[type=submit]")
            comparison = page.locator("#comparison .run-comparison[data-run='1']")
            await expect(comparison).to_be_visible(timeout=60_000)
            await expect(comparison.locator("tr[data-row='status'] td.recorded")).to_have_text("completed")
            await expect(comparison.locator("tr[data-row='status'] td.replayed")).to_have_text("completed")
            await expect(comparison.locator("tr[data-row='final text']")).to_have_class("differs")
            await expect(comparison.locator("tr[data-row='final text'] td.replayed")).to_have_text("Echo says wired.")
            await expect(comparison.locator("tr[data-row='tool calls'] td.replayed")).to_contain_text("slow_echo")
            await expect(comparison.locator("pre.diff")).to_contain_text("+Echo says wired.")
            await expect(page.locator("#comparison .verdict")).to_have_text("same statuses in every run")
            assert len(tool_provider.calls) == 1, "recorded tools: the provider was not called again"
            await page.screenshot(path=str(tmp_path / "waterfall.png"), full_page=True)
            replay_link = page.locator("#comparison p a.sid").first
            assert (await replay_link.text_content() or "").startswith(f"{sid}-replay-")

            # Fork here on the tool call's event: a new id, then the fork's page with its lineage
            tool_call = page.locator(".ev.tool", has_text="→ slow_echo")
            seq = int((await tool_call.locator(".meta").text_content() or "#0").split()[0].lstrip("#"))
            await tool_call.locator("button.fork-here").click()
            new_id = tool_call.locator("form.fork input[name=new_session_id]")
            assert (await new_id.input_value()).startswith(f"{sid}-fork-"), "a suggested id"
            fork = f"{sid}-f"
            await new_id.fill(fork)
            await tool_call.locator("form.fork button[type=submit]").click()
            await page.wait_for_url(f"**/session/{fork}", timeout=15_000)
            lineage = page.locator("#lineage .forked-from")
            await expect(lineage).to_have_text(f"forked from {sid} at seq {seq}", timeout=10_000)
            await expect(page.locator("#timeline")).to_contain_text("session.forked")
            await expect(page.locator("#status")).to_have_text("idle")
            # its source lists it among its forks (with the replay's fork), and the link goes back
            await lineage.locator("a").click()
            await page.wait_for_url(f"**/session/{sid}")
            await expect(page.locator("#lineage .forks")).to_contain_text(fork, timeout=10_000)

            # forking again into the same id is refused on the page
            first_event = page.locator(".ev").first
            await first_event.locator("button.fork-here").click()
            await first_event.locator("form.fork input[name=new_session_id]").fill(fork)
            await first_event.locator("form.fork button[type=submit]").click()
            await expect(first_event.locator(".fork-error")).to_contain_text("session_exists")
        finally:
            await browser.close()
    keep_screenshot(tmp_path / "waterfall.png", IMAGES / "inspector-waterfall.png")


def post(url: str, body: bytes, content_type: str) -> tuple[int, dict[str, object]]:
    import json
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


async def test_writes_take_json_only_and_bad_input_is_refused(inspector: str) -> None:
    # A cross-site form post (urlencoded) cannot approve or abort through the inspector.
    status, reply = await asyncio.to_thread(post, f"{inspector}/api/sessions/s1/abort", b"reason=x",
                                            "application/x-www-form-urlencoded")
    assert status == 415 and reply["error"]["code"] == "json_only"  # type: ignore[index]
    status, reply = await asyncio.to_thread(post, f"{inspector}/api/sessions/s1/explode", b"{}", "application/json")
    assert status == 404 and reply["error"]["code"] == "unknown_verb"  # type: ignore[index]
    status, reply = await asyncio.to_thread(post, f"{inspector}/api/start", b'{"session_id": "a b"}',
                                            "application/json")
    assert status == 400 and reply["error"]["code"] == "invalid_session_id"  # type: ignore[index]
    status, reply = await asyncio.to_thread(post, f"{inspector}/api/sessions/s1/abort", b'{"reason": "x"}',
                                            "application/json")
    assert status == 202 and reply["ack"]["stream"] == "LOOPWIRE_INGRESS"  # type: ignore[index]


REFUSALS = [  # (verb, body, HTTP status, error code)
    ("fork", b'{"new_session_id": "x1"}', 404, "unknown_session"),
    ("fork", b'{"new_session_id": "not an id"}', 400, "invalid_session_id"),
    ("fork", b'{"new_session_id": "x2", "at_seq": "3"}', 400, "invalid_seq"),
    ("replay", b'{"tools": "sometimes"}', 400, "bad_request"),
    ("replay", b"{}", 400, "replay_failed"),  # nothing to replay
]


async def test_fork_and_replay_refusals_come_back_as_errors(inspector: str) -> None:
    missing = f"nobody-{uuid.uuid4().hex[:8]}"
    for verb, body, expected, code in REFUSALS:
        status, reply = await asyncio.to_thread(post, f"{inspector}/api/sessions/{missing}/{verb}", body,
                                                "application/json")
        assert (status, reply["error"]["code"]) == (expected, code), (verb, body, reply)  # type: ignore[index]


async def test_delete_a_session_from_its_page_after_a_confirmation(inspector: str, chromium: str, nc_system: Any,
                                                                   fake: FakeAnthropic) -> None:
    from playwright.async_api import async_playwright, expect

    fake.script("*", [{"chunks": ["Noted."], "stop_reason": "end_turn"}])
    sid = f"ui-del-{uuid.uuid4().hex[:8]}"
    lw = nc_system
    assert (await lw.run(sid, {"input": "hi", "tools": []}, timeout=60))["status"] == "completed"
    status, reply = await asyncio.to_thread(post, f"{inspector}/api/sessions/{sid}/delete", b"{}", "application/json")
    assert status == 400 and reply["error"]["code"] == "unconfirmed"  # type: ignore[index]
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = await browser.new_page(viewport={"width": 1280, "height": 900})
        try:
            await page.goto(f"{inspector}/session/{sid}")
            await expect(page.locator("#timeline")).to_contain_text("Noted.", timeout=15_000)
            asked: list[str] = []

            async def dismiss(dialog: Any) -> None:
                asked.append(dialog.message)
                await dialog.dismiss()

            page.once("dialog", dismiss)
            await page.click("#delete button[type=submit]")
            await asyncio.sleep(0.5)
            assert asked and sid in asked[0], "it asks first"
            assert (await lw.session_get(sid))["status"] == "idle", "a dismissed question deletes nothing"

            async def accept(dialog: Any) -> None:
                await dialog.accept()

            page.once("dialog", accept)
            await page.click("#delete button[type=submit]")
            await expect(page.locator("#delete-status")).to_have_text("deleted", timeout=15_000)
            await expect(page.locator("#receipt")).to_contain_text("events_stream")
        finally:
            await browser.close()
    assert (await lw.session_get(sid))["status"] == "unknown"


@pytest.fixture
async def nc_system(system: LoopwireContainer) -> AsyncIterator[LoopwireClient]:
    lw = await LoopwireClient.connect(system.get_nats_url())
    try:
        yield lw
    finally:
        await lw.close()
