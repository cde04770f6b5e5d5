"""In-process tools for the in-process integration tests (tracing, large content)."""

from loopwire.tools.registry import tool


@tool(description="Add two integers.")
def add_numbers(a: int, b: int) -> int:
    return a + b


@tool(description="Return a large text of n bytes.")
def big_text(n: int) -> str:
    return ("0123456789abcdef" * (n // 16 + 1))[:n]
