"""ExprError, and how positions in the parsed text map back to the author's text."""

from __future__ import annotations

import ast
from typing import Any

from llamon_agent.expr.limits import _NEWLINES
from llamon_agent.expr.messages import Message


class ExprError(Exception):
    """Why an expression was rejected or failed, with its 1-based line and column when known.

    ``field`` names the rule field at fault ("name", "mcp_id", "tool_name", "when",
    "params") when the error comes from :func:`expression_rule`; ``str()`` then starts
    with it: ``"when: line 1, column 5: ..."``.

    Made from a :class:`~llamon_agent.expr.messages.Message`, it also carries the message's
    ``msg_id`` and ``params`` (llamon_agent.expr.messages): what an application needs to say
    ``reason`` in another language. ``reason`` is the English text either way.
    """

    def __init__(
        self,
        reason: str | Message,
        line: int | None = None,
        column: int | None = None,
        *,
        field: str | None = None,
        msg_id: str | None = None,
        params: dict[str, str] | None = None,
    ) -> None:
        if isinstance(reason, Message):
            msg_id, params, reason = reason.msg_id, reason.params, str(reason)
        super().__init__(reason, line, column)
        self.reason = reason
        self.line = line
        self.column = column
        self.field = field
        self.msg_id = msg_id
        self.params = dict(params or {})

    def __str__(self) -> str:
        prefix = f"{self.field}: " if self.field else ""
        if self.line is None:
            return f"{prefix}{self.reason}"
        if self.column is None:
            return f"{prefix}line {self.line}: {self.reason}"
        return f"{prefix}line {self.line}, column {self.column}: {self.reason}"

    def moved(
        self, *, field: str | None = None, line: int | None = None, column: int | None = None
    ) -> ExprError:
        """The same reason (and message id) for another field or place."""
        return ExprError(
            self.reason,
            self.line if line is None else line,
            self.column if column is None else column,
            field=field if field is not None else self.field,
            msg_id=self.msg_id,
            params=self.params,
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # Celery and multiprocessing pickle exceptions; keep field and the message id across the round trip.
        return (
            self.__class__,
            (self.reason, self.line, self.column),
            {"field": self.field, "msg_id": self.msg_id, "params": self.params},
        )


# --- source positions -----------------------------------------------------------------------
class _Source:
    """The author's text and how positions in the parsed (parenthesized) text map back to it."""

    __slots__ = ("text", "wrapped", "_lines")

    def __init__(self, text: str) -> None:
        self.text = text
        # Wrapping in parentheses lets an expression span lines and start indented, as typed
        # in a textarea; brackets are checked for balance first so it cannot change meaning.
        self.wrapped = "(" + text + "\n)"
        self._lines = _NEWLINES.split(text)

    def char_position(self, lineno: int | None, char_offset: int | None) -> tuple[int | None, int | None]:
        """Author's (line, column), both 1-based, from a 0-based character offset in the wrapped text."""
        if lineno is None:
            return None, None
        if lineno > len(self._lines):  # the synthetic closing parenthesis: "ends too early"
            return len(self._lines), len(self._lines[-1]) + 1
        column = max(char_offset or 0, 0)
        if lineno == 1:
            column -= 1  # the synthetic "("
        return lineno, max(column, 0) + 1

    def byte_position(self, lineno: int | None, byte_offset: int | None) -> tuple[int | None, int | None]:
        """Like :meth:`char_position` for a UTF-8 byte offset (what ``ast`` and code objects give)."""
        if lineno is None:
            return None, None
        if lineno > len(self._lines):
            return self.char_position(lineno, 0)
        line = ("(" if lineno == 1 else "") + self._lines[lineno - 1]
        chars = len(line.encode("utf-8")[: max(byte_offset or 0, 0)].decode("utf-8", "ignore"))
        return self.char_position(lineno, chars)

    def node_error(self, node: ast.AST, reason: str | Message) -> ExprError:
        line, column = self.byte_position(getattr(node, "lineno", None), getattr(node, "col_offset", None))
        return ExprError(reason, line, column)

    def attr_error(self, node: ast.Attribute, reason: str | Message) -> ExprError:
        """An error pointing at the attribute's name (``ctx.__dict__`` -> column of ``__dict__``)."""
        end_line, end_col = getattr(node, "end_lineno", None), getattr(node, "end_col_offset", None)
        if end_line is None or end_col is None:
            return self.node_error(node, reason)
        line, column = self.byte_position(end_line, end_col - len(node.attr.encode("utf-8")))
        return ExprError(reason, line, column)

    def is_synthetic_line(self, lineno: int | None) -> bool:
        return lineno is not None and lineno > len(self._lines)


def _type_name(value: Any) -> str:
    if value is None:
        return "None"
    names: dict[type, str] = {dict: "dict", list: "list", tuple: "tuple", str: "text", frozenset: "set"}
    return names.get(type(value), type(value).__name__)
