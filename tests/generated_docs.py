"""Rewrites the docs that are generated from the code (`make docs`): the README's settings
tables (from the settings classes, composed in loopwire/settings.py), docs/asyncapi.json
(from loopwire/asyncapi.py), and docs/reference/cli.md and docs/reference/python-api.md
(from the CLI's commands and the docstrings of `loopwire.Client` and `loopwire.testing`).
tests/unit/docs/test_sync.py and tests/unit/loopwire/test_asyncapi.py fail when one is out
of date; this is what their messages ask for.

    .venv/bin/python -m tests.generated_docs
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from loopwire.asyncapi import asyncapi_json
from loopwire.settings import settings_table
from tests.paths import REPO

PIPE = "\\|"
START = "<!-- settings-table:start"
END = "<!-- settings-table:end -->"


def _first_paragraph(obj: Any) -> str:
    # A class's own docstring, not one it inherits (testcontainers' base class has one).
    own = vars(obj).get("__doc__") if inspect.isclass(obj) else obj.__doc__
    doc = inspect.cleandoc(own) if own else ""
    return " ".join(doc.split("\n\n", 1)[0].split())


def cli_reference() -> str:
    """Every `loopwire` command, its arguments and options, from the Typer app."""
    import typer.main

    from loopwire.cli import app

    group = typer.main.get_command(app)
    out = ["# CLI reference", "", "Generated from loopwire/cli.py by `make docs`; `loopwire COMMAND --help` says the same.", ""]
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        out += [f"## `loopwire {name}`", "", _first_paragraph(command.callback) or (command.help or ""), ""]
        rows = [(" / ".join(p.opts), " ".join((getattr(p, "help", None) or "").split()))
                for p in command.params if p.name != "help"]
        if rows:
            out += ["| argument or option | meaning |", "|---|---|"]
            out += [f"| `{opts}` | {escaped} |" for opts, meaning in rows for escaped in [meaning.replace("|", PIPE)]]
            out.append("")
    return "\n".join(out)


def _members(cls: type) -> list[tuple[str, Any]]:
    return [(n, m) for n, m in vars(cls).items() if not n.startswith("_") and (callable(m) or isinstance(m, property))]


def _signature(obj: Any) -> str:
    try:
        return str(inspect.signature(obj))
    except (TypeError, ValueError):
        return ""


def python_api_reference() -> str:
    """`loopwire.Client` and every name of `loopwire.testing.__all__`: signature and summary."""
    import loopwire.testing as testing
    from loopwire.typed_client import Client

    out = ["# Python API reference", "",
           "Generated from the docstrings by `make docs`: `loopwire.Client` (loopwire/typed_client.py) and",
           "`loopwire.testing` (loopwire/testing/).", "", "## `loopwire.Client`", "", _first_paragraph(Client), ""]
    for name, member in _members(Client):
        target = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
        out += [f"- `{name}{_signature(target) if not isinstance(member, property) else ''}`: "
                f"{_first_paragraph(target)}"]
    out += ["", "## `loopwire.testing`", "", _first_paragraph(testing), ""]
    for name in testing.__all__:
        obj = getattr(testing, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            out += [f"### `{name}{_signature(obj)}`", "", _first_paragraph(obj), ""]
            if inspect.isclass(obj):
                for member_name, member in _members(obj):
                    target = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
                    if _first_paragraph(target):
                        out.append(f"- `{member_name}`: {_first_paragraph(target)}")
                out.append("")
        else:
            out += [f"### `{name}`", "", f"`{obj!r}`"[:300], ""]
    return "\n".join(out).rstrip() + "\n"


GENERATED: dict[str, Any] = {"docs/reference/cli.md": cli_reference,
                             "docs/reference/python-api.md": python_api_reference}


def regenerate() -> list[str]:
    """Write every generated doc; the paths whose text changed."""
    changed = []
    for rel, render in GENERATED.items():
        path: Path = REPO / rel
        text = render()
        if not path.exists() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            changed.append(rel)
    readme = REPO / "README.md"
    text = readme.read_text()
    start = text.index("\n", text.index(START)) + 1
    end = text.index(END)
    new = text[:start] + settings_table() + text[end:]
    if new != text:
        readme.write_text(new)
        changed.append("README.md")
    spec = REPO / "docs" / "asyncapi.json"
    if not spec.exists() or spec.read_text() != asyncapi_json():
        spec.write_text(asyncapi_json())
        changed.append("docs/asyncapi.json")
    return changed


if __name__ == "__main__":
    print("rewrote: " + (", ".join(regenerate()) or "nothing (already up to date)"))
