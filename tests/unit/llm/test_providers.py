"""Provider selection from the environment, and the model factories."""

from __future__ import annotations

import pytest

from loopwire.llm.demo_model import DemoModel
from loopwire.llm.providers import build_model_factory, provider_description, resolve_provider
from loopwire.settings import Settings

pytestmark = pytest.mark.unit


# -- providers --------------------------------------------------------------------------------
def test_provider_selection_from_the_environment() -> None:
    auto = Settings(llm_provider="auto")
    assert resolve_provider(auto, {}) == "scripted"
    assert resolve_provider(auto, {"ANTHROPIC_API_KEY": "sk-x"}) == "anthropic"
    assert resolve_provider(auto, {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}) == "anthropic"
    assert resolve_provider(Settings(llm_provider="scripted"), {"ANTHROPIC_API_KEY": "sk"}) == "scripted"
    assert resolve_provider(Settings(llm_provider="anthropic"), {}) == "anthropic"
    with pytest.raises(ValueError, match="LOOPWIRE_LLM_PROVIDER"):
        resolve_provider(Settings(llm_provider="openai"), {})
    assert provider_description(auto, {}) == "scripted offline model (no ANTHROPIC_API_KEY)"
    assert provider_description(auto, {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}).startswith(
        "Anthropic API at http://127.0.0.1:9")
    assert provider_description(auto, {"ANTHROPIC_API_KEY": "k"}) == \
        "Anthropic API at https://api.anthropic.com (API key set)"


async def test_model_factories() -> None:
    scripted = build_model_factory(Settings(), {})
    assert isinstance(scripted("a"), DemoModel) and scripted("a") is scripted("a")
    remote = build_model_factory(Settings(llm_timeout_s=5), {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9"})
    model = remote("claude-a")
    assert model is remote("claude-b"), "one model (its clients and their pools) for every model id"
    assert model.base_url.startswith("http://127.0.0.1:9")  # type: ignore[attr-defined]
    client = model._clients[0]  # type: ignore[attr-defined]
    assert client.api_key == "loopwire-local-no-key" and client.max_retries == 0 and client.timeout == 5
    await remote.aclose()


def _pool_size(client: object) -> int:
    """The connections the SDK client's transport holds at most (aiohttp's or httpx's)."""
    transport = client._client._transport  # type: ignore[attr-defined]  # noqa: SLF001
    if hasattr(transport, "limits"):  # the aiohttp transport: its connector's limit
        return int(transport.limits.max_connections)
    return int(transport._pool._max_connections)  # noqa: SLF001


def test_the_model_clients_hold_every_generation_a_replica_may_have_in_flight() -> None:
    from loopwire.llm.anthropic_model import CONNECTIONS_PER_CLIENT, AnthropicModel
    env = {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}
    small = AnthropicModel.from_settings(Settings(llm_max_handlers=10), env)
    assert [_pool_size(c) for c in small._clients] == [10]  # noqa: SLF001
    big = AnthropicModel.from_settings(Settings(llm_max_handlers=4096), env)
    taken = [big._take() for _ in range(2 * CONNECTIONS_PER_CLIENT + 1)]  # noqa: SLF001
    assert len(big._clients) == 3, "more clients as the requests in flight need them, pools of 128 each"  # noqa: SLF001
    assert taken.count(0) == taken.count(1) == CONNECTIONS_PER_CLIENT and taken[-1] == 2
    assert _pool_size(big._clients[2]) == CONNECTIONS_PER_CLIENT  # noqa: SLF001
    big._in_flight[0] -= 1  # noqa: SLF001 - a request of the first client ended
    assert big._take() == 0, "the first client with room: its connections are kept alive"  # noqa: SLF001
    assert big._most * CONNECTIONS_PER_CLIENT >= 4096  # noqa: SLF001
    assert Settings().llm_max_handlers >= 1000 > Settings().router_max_handlers, "sized for waiting, not CPU"
