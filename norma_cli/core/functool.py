"""Turn a plain typed Python function into a tool (schema from signature + docstring)."""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, Union, get_args, get_origin

from norma_cli.core.contract import CallContext, ContentBlock, Tool, ToolOutput, finite_json

_SIMPLE = {str: "string", int: "integer", float: "number", bool: "boolean"}


def annotation_schema(tp: Any) -> dict[str, Any]:
    """JSON Schema for a Python annotation (the common subset a tool signature uses)."""
    if tp is inspect.Parameter.empty or tp is Any:
        return {}
    if tp in _SIMPLE:
        return {"type": _SIMPLE[tp]}
    if tp is type(None):
        return {"type": "null"}
    origin = get_origin(tp)
    args = get_args(tp)
    if origin is Literal:
        return {"enum": list(args)}
    if origin in (Union, types.UnionType):
        non_null = [a for a in args if a is not type(None)]
        if len(non_null) == 1 and len(args) == 2:
            inner = annotation_schema(non_null[0])
            if "type" in inner and isinstance(inner["type"], str):
                return {**inner, "type": [inner["type"], "null"]}
            return {"anyOf": [inner, {"type": "null"}]}
        return {"anyOf": [annotation_schema(a) for a in args]}
    if origin in (list, tuple, set, frozenset) or tp in (list, tuple, set):
        schema: dict[str, Any] = {"type": "array"}
        if args and origin is not tuple:
            schema["items"] = annotation_schema(args[0])
        return schema
    if origin is dict or tp is dict:
        return {"type": "object"}
    raise TypeError(f"cannot express {tp!r} as JSON Schema")


def _param_docs(doc: str) -> tuple[str, dict[str, str]]:
    """Split a docstring into summary and ``name: text`` parameter lines (Google/reST style)."""
    summary_lines: list[str] = []
    params: dict[str, str] = {}
    in_args = False
    for raw in doc.splitlines():
        line = raw.strip()
        if line.lower() in ("args:", "arguments:", "parameters:", "params:"):
            in_args = True
            continue
        m = re.match(r":param\s+(\w+):\s*(.*)", line)
        if m:
            params[m.group(1)] = m.group(2)
            continue
        if in_args:
            m = re.match(r"(\w+)(?:\s*\([^)]*\))?\s*:\s*(.*)", line)
            if m:
                params[m.group(1)] = m.group(2)
                continue
            if not line:
                in_args = False
            continue
        summary_lines.append(line)
    return "\n".join(summary_lines).strip(), params


class FunctionTool(Tool):
    """A tool backed by a Python function; keyword arguments come from the input object."""

    def __init__(self, fn: Callable[..., Any], name: str | None = None, **meta: Any) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        summary, pdocs = _param_docs(inspect.getdoc(fn) or "")
        self.description = meta.pop("description", None) or summary or self.name
        hints = typing.get_type_hints(fn)
        props: dict[str, Any] = {}
        required: list[str] = []
        self._wants_ctx: str | None = None
        for pname, param in inspect.signature(fn).parameters.items():
            if hints.get(pname) is CallContext:
                self._wants_ctx = pname
                continue
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise TypeError("*args/**kwargs cannot become a tool schema")
            prop = annotation_schema(hints.get(pname, inspect.Parameter.empty))
            if pname in pdocs:
                prop["description"] = pdocs[pname]
            if param.default is inspect.Parameter.empty:
                required.append(pname)
            elif param.default is None or isinstance(param.default, (str, int, float, bool)):
                prop["default"] = param.default
            props[pname] = prop
        schema: dict[str, Any] = {
            "type": "object",
            "properties": props,
            "additionalProperties": False,
        }
        if required:
            schema["required"] = required
        self.input_schema = schema
        from norma_cli.core.registry import metadata_problem

        for key, value in meta.items():
            problem = metadata_problem(key, value)  # read_only="no" must not read as true
            if problem is not None:
                raise TypeError(problem)  # the registry names the tool and its plugin
            setattr(self, key, value)
        self._is_async = inspect.iscoroutinefunction(fn)

    def call(self, tool_input: dict[str, Any], ctx: CallContext) -> Any:
        kwargs = dict(tool_input)
        if self._wants_ctx:
            kwargs[self._wants_ctx] = ctx
        if self._is_async:
            return self._acall(kwargs)
        return to_output(self.fn(**kwargs))

    async def _acall(self, kwargs: dict[str, Any]) -> ToolOutput:
        return to_output(await self.fn(**kwargs))


def to_output(value: Any) -> ToolOutput:
    """Wrap whatever a function returned as a ToolOutput (str → text, else JSON block)."""
    if isinstance(value, ToolOutput):
        return value
    if isinstance(value, str):
        return ToolOutput.text(value)
    if value is None:
        return ToolOutput.text("")
    # NaN / Infinity become strings here, so hooks, traces and the printed line all see JSON.
    return ToolOutput([ContentBlock("json", data=finite_json(value))])
