"""The session inspector (`loopwire ui`) in a real browser: Playwright drives Debian's
chromium (installed by `make test`) against `loopwire ui` and `loopwire up`. Open the
list, start a turn_by_turn run from the form, watch its text stream in, click Approve
on its checkpoint, see it complete; the list shows it, filtered by status."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from loopwire.testing import LoopwireContainer, free_port
from tests.e2e.cli_driver import cli_env
from tests.fakes.anthropic_server import FakeAnthropic

pytestmark = pytest.mark.e2e

CHROMIUM = "/usr/bin/chromium"
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "img" / "inspector.png"


@pytest.fixture
def chromium() -> str:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs Debian's chromium (apt-get install chromium)")
    return CHROMIUM


def keep_screenshot(taken: Path) -> None:
    assert taken.stat().st_size > 10_000, "a page, not a blank"
    if os.environ.get("LOOPWIRE_UPDATE_SCREENSHOT"):  # refreshes the README's picture
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(taken, SCREENSHOT)


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
            await page.screenshot(path=str(tmp_path / "inspector.png"), full_page=True)
            await approve.click()
            ended = page.locator(".ev.ended")
            await expect(ended).to_have_attribute("data-status", "completed", timeout=30_000)
            await expect(ended).to_contain_text("Roses are red, loops are wired.")
            await expect(timeline).to_contain_text("phase execute → done")
            await expect(page.locator("#status")).to_have_text("idle", timeout=10_000)

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
