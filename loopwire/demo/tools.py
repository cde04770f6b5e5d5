"""Demo tools for the offline demo (`make run`): a safe calculator and the time.

Load them with ``LOOPWIRE_TOOL_MODULES=loopwire.demo.tools``.

The calculator never calls `eval`: it parses the expression and walks the syntax tree,
accepting numbers, `+ - * / // % **`, parentheses and unary signs, and nothing else.
Sizes are bounded so a request cannot make the service burn CPU or memory
(`9**9**9` is refused rather than computed).
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from datetime import UTC, datetime

from loopwire.tools.registry import ToolError, tool

MAX_EXPRESSION_CHARS = 500
MAX_EXPONENT = 1000
MAX_RESULT_BITS = 4096
"""Integers beyond ~1233 decimal digits are refused."""

_BINARY: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[float], float]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}
_SYMBOL = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
           ast.Pow: "**"}


class CalculatorError(ToolError):
    """An expression the calculator refuses or cannot evaluate."""


def evaluate(expression: str) -> int | float:
    """The value of an arithmetic expression, or CalculatorError saying what is wrong."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"expression too long (more than {MAX_EXPRESSION_CHARS} characters)")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise CalculatorError(f"not a valid arithmetic expression: {exc.msg}") from None
    return _eval(tree.body)


def _eval(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant):
        # bool is an int subclass; True + 1 is not arithmetic a user meant.
        if isinstance(node.value, bool) or not isinstance(node.value, int | float):
            raise CalculatorError(f"unsupported value: {node.value!r}")
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow):
            _check_power(left, right)
        try:
            value = _BINARY[type(node.op)](left, right)
        except ZeroDivisionError:
            raise CalculatorError("division by zero") from None
        except OverflowError:
            raise CalculatorError("result too large") from None
        return _checked(value)
    raise CalculatorError(f"unsupported expression: {_describe(node)}; only numbers, "
                          "+ - * / // % **, parentheses and unary minus are allowed")


def _check_power(base: float, exponent: float) -> None:
    if abs(exponent) > MAX_EXPONENT:
        raise CalculatorError(f"exponent too large (|exponent| > {MAX_EXPONENT})")
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and abs(base) > 1:
        if abs(base).bit_length() * exponent > MAX_RESULT_BITS + abs(base).bit_length():
            raise CalculatorError("result too large")
    if base == 0 and exponent < 0:
        raise CalculatorError("division by zero")


def _checked(value: float | complex) -> int | float:
    if isinstance(value, complex):  # e.g. (-8) ** 0.5
        raise CalculatorError("the result is not a real number")
    if isinstance(value, int) and value.bit_length() > MAX_RESULT_BITS:
        raise CalculatorError("result too large")
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculatorError("result too large")
    return value


def _describe(node: ast.AST) -> str:
    if isinstance(node, ast.Call):
        return "function calls"
    if isinstance(node, ast.Name):
        return f"name {node.id!r}"
    if isinstance(node, ast.Attribute):
        return "attribute access"
    if isinstance(node, ast.BinOp | ast.UnaryOp):
        return f"operator {type(node.op).__name__}"
    return type(node).__name__


def format_number(value: int | float) -> str:
    """Integral floats print as integers (6/3 is "2"); others as Python prints them."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    return repr(value) if isinstance(value, float) else str(value)


@tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression and return the result.

    Supports numbers, + - * / // % ** and parentheses, e.g. "(2 + 3) * 4 ** 2".

    Args:
        expression: The arithmetic expression to evaluate.
    """
    return format_number(evaluate(expression))


@tool
def current_time() -> str:
    """The current date and time in UTC, in ISO 8601 format."""
    return datetime.now(UTC).isoformat(timespec="seconds")
