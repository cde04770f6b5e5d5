"""An in-process tool for the tracing test."""

from loopwire.tools.registry import tool


@tool(description="Add two integers.")
def add_numbers(a: int, b: int) -> int:
    return a + b
