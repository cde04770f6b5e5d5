"""Which backend answers: the Anthropic API, or the offline demo brain.

`settings.llm_provider` is `anthropic`, `scripted` or `auto`; `auto` picks Anthropic
when ANTHROPIC_API_KEY or ANTHROPIC_BASE_URL is set in the environment and the
scripted demo brain otherwise, so `loopwire up` works out of the box with no key.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from .demo_model import DemoModel
from .model import Model
from .settings import LlmSettings

PROVIDERS = ("anthropic", "scripted", "auto")


def resolve_provider(settings: LlmSettings, environ: Mapping[str, str] | None = None) -> str:
    """`anthropic` or `scripted`, after resolving `auto` against the environment."""
    env = os.environ if environ is None else environ
    choice = settings.llm_provider.strip().lower()
    if choice not in PROVIDERS:
        raise ValueError(f"LOOPWIRE_LLM_PROVIDER must be one of {', '.join(PROVIDERS)}, not {choice!r}")
    if choice == "auto":
        return "anthropic" if env.get("ANTHROPIC_API_KEY") or env.get("ANTHROPIC_BASE_URL") else "scripted"
    return choice


def provider_description(settings: LlmSettings, environ: Mapping[str, str] | None = None) -> str:
    """One line for the CLI: where model calls go."""
    env = os.environ if environ is None else environ
    if resolve_provider(settings, env) == "scripted":
        why = "LOOPWIRE_LLM_PROVIDER=scripted" if settings.llm_provider.strip().lower() == "scripted" \
            else "no ANTHROPIC_API_KEY"
        return f"scripted offline model ({why})"
    base = env.get("ANTHROPIC_BASE_URL") or "https://api.anthropic.com"
    key = "API key set" if env.get("ANTHROPIC_API_KEY") else "no API key"
    return f"Anthropic API at {base} ({key})"


class ModelFactory:
    """model id -> Model, one instance per id; `aclose()` releases the HTTP client."""

    def __init__(self, settings: LlmSettings, environ: Mapping[str, str] | None = None) -> None:
        self.provider = resolve_provider(settings, environ)
        self._settings = settings
        self._environ = environ
        self._models: dict[str, Model] = {}
        self._shared: Model | None = None

    def __call__(self, model_id: str) -> Model:
        model = self._models.get(model_id)
        if model is None:
            model = self._models[model_id] = self._build()
        return model

    def _build(self) -> Model:
        if self.provider == "scripted":
            return DemoModel()
        # One model (its SDK clients and their connection pools) serves every model id.
        if self._shared is None:
            from .anthropic_model import AnthropicModel

            self._shared = AnthropicModel.from_settings(self._settings, self._environ)
        return self._shared

    async def aclose(self) -> None:
        if self._shared is not None:
            await self._shared.aclose()
            self._shared = None
        self._models.clear()


def build_model_factory(settings: LlmSettings, environ: Mapping[str, str] | None = None) -> ModelFactory:
    return ModelFactory(settings, environ)
