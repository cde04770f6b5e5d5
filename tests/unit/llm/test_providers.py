"""Provider selection from the environment, and the model factories."""

from __future__ import annotations

import pytest

from loopwire.llm.demo_model import DemoModel
from loopwire.llm.providers import build_model_factory, provider_description, resolve_provider
from loopwire.shared.runtime.settings import Settings

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
    assert model is remote("claude-b"), "one client (one connection pool) for every model id"
    assert model.base_url.startswith("http://127.0.0.1:9")  # type: ignore[attr-defined]
    client = model._client  # type: ignore[attr-defined]
    assert client.api_key == "loopwire-local-no-key" and client.max_retries == 0 and client.timeout == 5
    await remote.aclose()


def test_the_model_clients_pool_holds_every_generation_a_replica_may_have_in_flight() -> None:
    from loopwire.llm.anthropic_model import build_client
    for handlers in (4096, 10):
        client = build_client(Settings(llm_max_handlers=handlers), {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9"})
        assert client._client._transport._pool._max_connections == handlers  # noqa: SLF001 - the pool's size
    assert Settings().llm_max_handlers >= 1000 > Settings().router_max_handlers, "sized for waiting, not CPU"
