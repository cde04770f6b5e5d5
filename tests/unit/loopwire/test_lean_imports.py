"""A `loopwire serve NAME` process imports only what its service uses: the model SDK, MCP,
ACP and dulwich load where and when they are used, so an idle service holds tens of MB
less and starts in a fraction of the time (the bench measures both: tests/bench/lean.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from loopwire.launcher import SERVICE_NAMES

HEAVY = ("anthropic", "mcp", "acp", "dulwich", "openai")


def modules_loaded_by(service: str) -> set[str]:
    """Top-level packages imported by the CLI plus the launcher and the service's class, as
    `loopwire serve <service>` does before it connects (a fresh interpreter)."""
    code = ("import json, sys, loopwire.cli; from loopwire.launcher import service_class; "
            f"service_class({service!r}); print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return set(json.loads(out.stdout))


@pytest.mark.parametrize("service", SERVICE_NAMES)
def test_a_service_imports_no_sdk_it_does_not_use_at_start(service: str) -> None:
    loaded = modules_loaded_by(service)
    assert "loopwire" in loaded
    assert not loaded & set(HEAVY), f"`loopwire serve {service}` imports {sorted(loaded & set(HEAVY))}"


def test_the_model_sdk_loads_once_the_anthropic_model_is_built() -> None:
    code = ("import sys; from loopwire.llm.providers import ModelFactory; from loopwire.settings "
            "import Settings; assert 'anthropic' not in sys.modules; "
            "f = ModelFactory(Settings(llm_provider='anthropic'), {'ANTHROPIC_API_KEY': 'x'}); f('claude'); "
            "print('anthropic' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "True"
