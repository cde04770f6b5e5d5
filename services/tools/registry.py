"""In-process Python tools: the `@tool` decorator and the registry that holds them.

A tool is a plain function, async or sync::

    @tool
    def add(a: float, b: float) -> float:
        \"\"\"Add two numbers.\"\"\"
        return a + b

Its input schema is derived from the signature (a pydantic model built from the
parameters, rendered as JSON Schema) unless one is given; its description is the
docstring's text before an ``Args:`` section, whose entries describe the parameters.
A sync function runs in a worker thread so it never blocks the event loop.

Modules listed in ``settings.tool_modules`` are imported when the tools service starts,
and the decorators in them register into :data:`default_registry`.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import logging
import re
import typing
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from jsonschema.validators import Draft202012Validator, validator_for
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from loopwire.shared.contract.argument_schema import ArgumentValidator
from loopwire.shared.contract.protocol import RESERVED_TOOL_NAMES

from .retry import RetryPolicy, TransientToolError  # noqa: F401 - TransientToolError is public here
from .staging import EXECUTIONS

log = logging.getLogger("loopwire.tools.registry")

TOOL_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
"""What the Anthropic Messages API accepts as a tool name."""

RESERVED_NAMES = RESERVED_TOOL_NAMES
"""Names the router answers itself (`finish_agentic_task`, `update_plan`); no tool may
take them."""


@dataclass(frozen=True)
class CallContext:
    """The call an in-process tool is running for: the same ids a NATS provider gets as
    headers. A tool that starts a child run forwards `headers()` on the child's `start`,
    so the router knows the child's parent (services/router/core/subagent.py)."""

    session_id: str
    tool_use_id: str
    user_id: str | None = None
    """StartRun `user_id` of the run (a NATS provider's `Loopwire-User-Id`)."""
    workspace_id: str | None = None
    """StartRun `metadata.workspace_id` (a NATS provider's `Loopwire-Workspace-Id`)."""

    def headers(self) -> dict[str, str]:
        return {"Loopwire-Session-Id": self.session_id, "Loopwire-Tool-Use-Id": self.tool_use_id}


_current_call: ContextVar[CallContext | None] = ContextVar("loopwire_tool_call", default=None)


def current_call() -> CallContext | None:
    """The call the running in-process tool serves (None outside a tool call)."""
    return _current_call.get()


class ToolError(Exception):
    """Raise from a tool to give the model an error result with exactly this text."""


def compile_validator(schema: dict[str, Any]) -> ArgumentValidator:
    """A JSON Schema validator for `schema` (Draft 2020-12 unless `$schema` says otherwise),
    with the compiled check of a flat schema in front (shared/contract/argument_schema.py).

    Raises `jsonschema.SchemaError` when the schema itself is invalid."""
    cls = validator_for(schema, default=Draft202012Validator)
    cls.check_schema(schema)
    return ArgumentValidator(cls(schema))


@dataclass
class PythonTool:
    """One registered in-process tool."""

    name: str
    description: str
    input_schema: dict[str, Any]
    fn: Callable[..., Any]
    exclusive: bool = False
    """Runs alone: calls before it finish first, calls after it wait for it."""
    execution: str | None = None
    """`parallel`, `sequential` or `exclusive` (staging.py); None: from `exclusive`."""
    depends_on: tuple[str, ...] = ()
    """Tools whose calls in the same turn finish before a call of this one starts."""
    timeout_s: float | None = None
    """Overrides settings.tool_timeout_s for this tool."""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    """Retries of transient failures (TransientToolError)."""
    input_model: type[BaseModel] | None = None
    """The pydantic model the schema came from (None when a schema was given): it
    converts the validated JSON input into the parameter types (dates, models...)."""
    validator: ArgumentValidator = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.validator = compile_validator(self.input_schema)

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)

    async def call(self, arguments: dict[str, Any], context: CallContext | None = None) -> Any:
        """Run the function with `arguments` (already checked against the schema);
        `current_call()` gives it `context` (a thread of a sync tool copies it)."""
        kwargs = self._kwargs(arguments)
        token = _current_call.set(context)
        try:
            if self.is_async:
                return await self.fn(**kwargs)
            return await asyncio.to_thread(self.fn, **kwargs)
        finally:
            _current_call.reset(token)

    def _kwargs(self, arguments: dict[str, Any]) -> dict[str, Any]:
        if self.input_model is None:
            return dict(arguments)
        try:
            model = self.input_model.model_validate(arguments)
        except ValidationError as exc:
            # The JSON Schema passed; pydantic can still refuse (e.g. a bad date string).
            raise ToolError(f"invalid input for tool {self.name}: {_pydantic_error(exc)}") from None
        return {name: getattr(model, name) for name in type(model).model_fields}


class ToolRegistry:
    """Tools by name. `tool` registers into it; `load_modules` fills it from settings."""

    def __init__(self) -> None:
        self._tools: dict[str, PythonTool] = {}

    def __contains__(self, name: str) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def get(self, name: str) -> PythonTool | None:
        return self._tools.get(name)

    def all(self) -> list[PythonTool]:
        return list(self._tools.values())

    def add(self, fn: Callable[..., Any], *, name: str | None = None, description: str | None = None,
            exclusive: bool = False, timeout_s: float | None = None,
            input_schema: dict[str, Any] | None = None, retries: int = 0,
            retry_backoff_s: float = 0.2, execution: str | None = None,
            depends_on: Iterable[str] = ()) -> PythonTool:
        """Register `fn`; a later registration under the same name replaces the earlier
        one (a module re-imported in tests, a deliberate override)."""
        tool_name = name or fn.__name__
        if not TOOL_NAME_RE.match(tool_name):
            raise ValueError(f"tool name {tool_name!r} must match {TOOL_NAME_RE.pattern}")
        if tool_name in RESERVED_NAMES:
            raise ValueError(f"tool name {tool_name!r} is reserved")
        if execution is not None and execution not in EXECUTIONS:
            raise ValueError(f"execution {execution!r} of tool {tool_name!r} must be one of {', '.join(EXECUTIONS)}")
        summary, param_docs = parse_docstring(inspect.getdoc(fn) or "")
        model: type[BaseModel] | None = None
        if input_schema is None:
            model = input_model_for(fn, tool_name, param_docs)
            input_schema = schema_of(model)
        spec = PythonTool(name=tool_name, description=description if description is not None else summary,
                          input_schema=input_schema, fn=fn, exclusive=exclusive, timeout_s=timeout_s,
                          input_model=model, retry=RetryPolicy(retries, retry_backoff_s),
                          execution=execution, depends_on=tuple(depends_on))
        if tool_name in self._tools and self._tools[tool_name].fn is not fn:
            log.warning("tool %s registered again; the new definition replaces the old", tool_name)
        self._tools[tool_name] = spec
        return spec

    def tool(self, fn: Callable[..., Any] | str | None = None, *, name: str | None = None,
             description: str | None = None, exclusive: bool = False, timeout_s: float | None = None,
             input_schema: dict[str, Any] | None = None, retries: int = 0, retry_backoff_s: float = 0.2,
             execution: str | None = None, depends_on: Iterable[str] = ()) -> Any:
        """Decorator: ``@reg.tool``, ``@reg.tool("name")`` or ``@reg.tool(name=..., ...)``.
        Returns the function unchanged, so it stays callable as before."""
        if isinstance(fn, str):
            name, fn = fn, None

        def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
            self.add(func, name=name, description=description, exclusive=exclusive,
                     timeout_s=timeout_s, input_schema=input_schema, retries=retries,
                     retry_backoff_s=retry_backoff_s, execution=execution, depends_on=depends_on)
            return func

        return decorate(fn) if fn is not None else decorate


default_registry = ToolRegistry()
"""Where the module-level :func:`tool` decorator registers."""


def tool(fn: Callable[..., Any] | str | None = None, *, name: str | None = None,
         description: str | None = None, exclusive: bool = False, timeout_s: float | None = None,
         input_schema: dict[str, Any] | None = None, retries: int = 0, retry_backoff_s: float = 0.2,
         execution: str | None = None, depends_on: Iterable[str] = ()) -> Any:
    """Register a function as a tool in :data:`default_registry` (see `ToolRegistry.tool`)."""
    return default_registry.tool(fn, name=name, description=description, exclusive=exclusive,
                                 timeout_s=timeout_s, input_schema=input_schema, retries=retries,
                                 retry_backoff_s=retry_backoff_s, execution=execution, depends_on=depends_on)


def load_modules(modules: Iterable[str]) -> list[str]:
    """Import each module so its `@tool` decorators run; returns the names imported.
    A module that fails to import is an error at start-up, not a silent gap."""
    loaded = []
    for module in modules:
        module = module.strip()
        if module:
            importlib.import_module(module)
            loaded.append(module)
    return loaded


# -- schema derivation ----------------------------------------------------------------------
def input_model_for(fn: Callable[..., Any], tool_name: str,
                    param_docs: dict[str, str] | None = None) -> type[BaseModel]:
    """A pydantic model with one field per parameter of `fn`."""
    hints = _type_hints(fn, tool_name)
    fields: dict[str, Any] = {}
    for pname, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ValueError(f"tool {tool_name}: *args/**kwargs need an explicit input_schema")
        if param.kind is param.POSITIONAL_ONLY:
            raise ValueError(f"tool {tool_name}: positional-only parameters cannot take JSON input")
        annotation = hints.get(pname, Any)
        doc = (param_docs or {}).get(pname)
        default = ... if param.default is param.empty else param.default
        fields[pname] = (annotation, Field(default, description=doc) if doc else default)
    model_name = "".join(part.capitalize() for part in re.split(r"[_-]", tool_name)) + "Input"
    return create_model(model_name, __config__=ConfigDict(extra="forbid"), **fields)


def _type_hints(fn: Callable[..., Any], tool_name: str) -> dict[str, Any]:
    """Resolved annotations; one that cannot be resolved (a class local to a function,
    under `from __future__ import annotations`) becomes Any, with a warning."""
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except Exception:
        pass
    hints: dict[str, Any] = {}
    namespace = getattr(fn, "__globals__", {})
    for pname, annotation in getattr(fn, "__annotations__", {}).items():
        if not isinstance(annotation, str):
            hints[pname] = annotation
            continue
        try:
            hints[pname] = eval(annotation, namespace)  # noqa: S307 - the tool author's own annotation
        except Exception:
            log.warning("tool %s: cannot resolve the type of %r (%s); any value is accepted",
                        tool_name, pname, annotation)
            hints[pname] = Any
    return hints


def schema_of(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON Schema without pydantic's generated titles (noise in a prompt)."""
    schema = model.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        if isinstance(prop, dict):
            prop.pop("title", None)
    schema.setdefault("properties", {})
    return schema


_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters):\s*$")
_SECTION_HEADER = re.compile(r"^\s*(Returns|Raises|Yields|Examples?|Notes?):\s*$")
_ARG_LINE = re.compile(r"^\s*(\*{0,2}\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into (description, {param: description})."""
    summary: list[str] = []
    params: dict[str, str] = {}
    section = "summary"
    current: str | None = None
    params_indent = 0
    for line in doc.splitlines():
        if _ARGS_HEADER.match(line):
            section, current = "args", None
            continue
        if _SECTION_HEADER.match(line):
            section, current = "other", None
            continue
        if section == "summary":
            summary.append(line)
        elif section == "args":
            match = _ARG_LINE.match(line)
            indent = len(line) - len(line.lstrip())
            if match and (current is None or indent <= params_indent):
                current = match.group(1).lstrip("*")
                params_indent = indent
                params[current] = match.group(3).strip()
            elif current is not None and line.strip():
                params[current] = f"{params[current]} {line.strip()}".strip()
    return "\n".join(summary).strip(), params


def _pydantic_error(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "input"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)
