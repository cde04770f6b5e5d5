"""loopwire: a distributed runtime for LLM agent loops over NATS and Redis.

`loopwire.Client` is the typed async client of the public contract (loopwire/typed_client.py);
`loopwire.__version__` the release (what `loopwire --version` prints, CHANGELOG.md).
"""

from __future__ import annotations

from typing import Any

__all__ = ["Client", "__version__"]


def __getattr__(name: str) -> Any:
    # Imported on first use: `import loopwire` (and the CLI) stays light.
    if name == "__version__":
        from loopwire.commands import loopwire_version

        return loopwire_version()
    if name == "Client":
        from loopwire.typed_client import Client

        return Client
    raise AttributeError(name)
