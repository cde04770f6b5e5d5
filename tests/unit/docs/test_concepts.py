"""docs/concepts.md's phase diagrams are the profiles' transition tables: every profile
named in a diagram has exactly the moves services/router/core/profiles.py allows, and every
profile of the contract with phases of its own is drawn."""

from __future__ import annotations

import re

import pytest

from loopwire.router.core.profiles import PROFILES
from tests.paths import REPO

pytestmark = pytest.mark.unit

DIAGRAM = re.compile(r"```mermaid\nstateDiagram-v2\n\s*%% profile: (\w+)\n(.*?)```", re.S)
EDGE = re.compile(r"^\s*(\S+) --> (\S+)\s*$", re.M)


def drawn() -> dict[str, set[tuple[str, str]]]:
    text = (REPO / "docs" / "concepts.md").read_text()
    return {name: {(a, b) for a, b in EDGE.findall(body) if "[*]" not in (a, b)}
            for name, body in DIAGRAM.findall(text)}


def moves(name: str) -> set[tuple[str, str]]:
    return {(a, b) for a, targets in PROFILES[name].transitions.items() for b in targets}


def test_each_drawn_profile_has_the_moves_of_its_table() -> None:
    diagrams = drawn()
    assert {"agentic", "agentic_planned", "turn_by_turn", "conversational"} <= set(diagrams)
    for name, edges in diagrams.items():
        assert edges == moves(name), f"docs/concepts.md's diagram of {name} differs from profiles.py"


def test_the_profiles_not_drawn_share_agentic_s_moves() -> None:
    """The executors are drawn with agentic ("and the executors ..."): the same table."""
    for name in set(PROFILES) - set(drawn()):
        assert moves(name) == moves("agentic"), name
