"""What an import reads and gives: the limits, the results, the errors, the parsed module."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from llamon_agent.expr.errors import ExprError
from llamon_agent.expr.limits import BUILTIN_NAMES

MAX_SOURCE_BYTES = 1024 * 1024  # a 40-function module is ~20 KB
MAX_TREE_DEPTH = 100  # syntax-tree depth of the module
MAX_TREE_NODES = 200_000
MAX_LEAVES = 256  # returns reachable in one function once every if is unfolded
# ... and in the whole module: the work of a translation grows with its paths (~60 us each), so a
# 1 MB file of functions just under MAX_LEAVES took 20 s of the web's CPU. The seed has 3.
MAX_MODULE_PATHS = 4096
MAX_STATEMENTS = 500  # statements in one routing function (the translation recurses on them)
RULESET_FORMAT = "llamon-ruleset/1"

_CTX_FIELDS = frozenset({"query", "context", "a2a_data", "a2a_files", "mcp_tools"})
_BUILTINS = frozenset(BUILTIN_NAMES)
_STR_CHAIN = frozenset({"lower", "upper", "casefold", "strip", "lstrip", "rstrip"})

_INVERSE: dict[type, str] = {
    ast.In: "not in",
    ast.NotIn: "in",
    ast.Is: "is not",
    ast.IsNot: "is",
    ast.Eq: "!=",
    ast.NotEq: "==",
}

# Precedence of an expression's top node, for parentheses when pieces are put together.
_P_IFEXP, _P_OR, _P_AND, _P_NOT, _P_CMP, _P_ARITH, _P_ATOM = 0, 1, 2, 3, 4, 5, 10


class ToolsImportError(ValueError):
    """The file as a whole cannot be read (too big, not Python, too deep); ``line`` when known."""

    def __init__(self, reason: str, *, code: str, line: int | None = None, detail: str = "") -> None:
        self.reason, self.code, self.line, self.detail = reason, code, line, detail
        super().__init__(f"line {line}: {reason}" if line else reason)


@dataclass(frozen=True, slots=True)
class ImportedRule:
    """One rule read from a function (a function returning several tools gives several)."""

    name: str
    description: str
    mcp_id: str
    tool_name: str
    when: str
    params: str
    stop: bool
    enabled: bool
    function: str
    line: int

    def to_json(self) -> dict[str, Any]:
        """The rule as a ``llamon-ruleset/1`` rule (the rule set snapshot's fields, in order)."""
        return {
            "name": self.name,
            "description": self.description,
            "mcp_id": self.mcp_id,
            "tool_name": self.tool_name,
            "when": self.when,
            "params": self.params,
            "stop": self.stop,
            "enabled": self.enabled,
        }


@dataclass(frozen=True, slots=True)
class Untranslatable:
    """A function left out, where and why. ``code`` names the kind of reason, ``detail`` its subject."""

    function: str
    file: str
    line: int
    code: str
    detail: str
    reason: str
    # For code "expression": the checker's error, whose message id a user interface translates.
    expr_error: ExprError | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.function}: {self.reason}"

    def to_json(self) -> dict[str, Any]:
        return {
            "function": self.function,
            "file": self.file,
            "line": self.line,
            "code": self.code,
            "detail": self.detail,
            "reason": self.reason,
        }


@dataclass
class ToolsImport:
    """What a module gives: rules in order, the functions left out, and notes (no DETERMINISTIC_TOOLS...)."""

    filename: str
    rules: list[ImportedRule] = field(default_factory=list)
    untranslatable: list[Untranslatable] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def ruleset(self, name: str, description: str = "") -> dict[str, Any]:
        """A ``llamon-ruleset/1`` document of the rules (no cases)."""
        return {
            "format": RULESET_FORMAT,
            "name": name,
            "description": description,
            "rules": [r.to_json() for r in self.rules],
            "cases": [],
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "filename": self.filename,
            "rules": [r.to_json() | {"function": r.function, "line": r.line} for r in self.rules],
            "untranslatable": [u.to_json() for u in self.untranslatable],
            "notes": list(self.notes),
        }


class _TooLong(Exception):
    pass


class _Refused(Exception):
    def __init__(
        self, node: ast.AST | int, code: str, detail: str, reason: str, expr_error: ExprError | None = None
    ) -> None:
        self.line = node if isinstance(node, int) else getattr(node, "lineno", 0)
        self.code, self.detail, self.reason, self.expr_error = code, detail, reason, expr_error
        super().__init__(reason)


@dataclass
class _Module:
    source: str
    filename: str
    lines: list[bytes]
    offsets: list[int]
    raw: bytes
    names: dict[str, int]  # module-level name -> line it is bound at
    functions: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]]
    compiled: dict[str, tuple[str, str]]  # name -> ("when"|"params", source) of compile_when/compile_params
    decorators: set[str]  # local names of deterministic_tool
    ctx_names: set[str]  # local names of compile_when / compile_params imported from llamon_agent.expr
    paths: int = 0  # paths unfolded so far in all its functions (MAX_MODULE_PATHS)


def _decorator(fn: ast.FunctionDef | ast.AsyncFunctionDef, module: _Module) -> ast.Call | None:
    for deco in fn.decorator_list:
        func = deco.func if isinstance(deco, ast.Call) else deco
        if (isinstance(func, ast.Name) and func.id in module.decorators) or (
            isinstance(func, ast.Attribute) and func.attr == "deterministic_tool"
        ):
            return deco if isinstance(deco, ast.Call) else ast.Call(func=func, args=[], keywords=[])
    return None
