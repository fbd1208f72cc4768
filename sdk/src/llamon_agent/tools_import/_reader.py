"""The module read as a whole: size and depth caps, the functions to translate and their order."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from llamon_agent.tools_import._function import _function_rules
from llamon_agent.tools_import._model import (
    MAX_SOURCE_BYTES,
    MAX_TREE_DEPTH,
    MAX_TREE_NODES,
    ToolsImport,
    ToolsImportError,
    Untranslatable,
    _decorator,
    _Module,
    _Refused,
)


def translate_tools_module(source: str | bytes, *, filename: str = "app/tools.py") -> ToolsImport:
    """Read ``source`` (an ``app/tools.py``) into rules; :class:`ToolsImportError` if it cannot be read at all."""
    module, tree = _parse(source, filename)
    result = ToolsImport(filename=filename)
    listed, listed_line = _tools_list(tree, result)
    decorated = [
        fn.name
        for fn in tree.body
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and _decorator(fn, module) is not None
    ]
    order: list[tuple[str, int, bool]] = []  # (name, line of the mention, enabled)
    if listed is None:
        if decorated:
            result.notes.append(
                "no DETERMINISTIC_TOOLS list: the @deterministic_tool functions are taken in source order"
            )
        order = [(name, module.functions[name][-1].lineno, True) for name in dict.fromkeys(decorated)]
    else:
        order = [(name, line, True) for name, line in listed]
        left_out = [n for n in dict.fromkeys(decorated) if n not in {name for name, _ in listed}]
        for name in left_out:
            order.append((name, module.functions[name][-1].lineno, False))
        if left_out:
            result.notes.append(
                f"decorated but not in DETERMINISTIC_TOOLS (line {listed_line}), imported disabled: "
                + ", ".join(left_out)
            )
    taken: set[str] = set()
    seen: set[str] = set()
    for name, line, enabled in order:
        try:
            if name in seen:
                raise _Refused(line, "listed-twice", name, f"{name} is listed twice in DETERMINISTIC_TOOLS")
            seen.add(name)
            defs = module.functions.get(name)
            if not defs:
                raise _Refused(
                    line,
                    "not-defined",
                    name,
                    f"{name} is not a function defined in this module"
                    + (f" (line {module.names[name]})" if name in module.names else ""),
                )
            fn = defs[-1]
            if len(defs) > 1 or module.names.get(name, fn.lineno) != fn.lineno:
                raise _Refused(
                    fn, "redefined", name, f"the name {name} is bound more than once in the module"
                )
            rules = _function_rules(fn, module, enabled, taken)
        except _Refused as exc:
            result.untranslatable.append(
                Untranslatable(name, filename, exc.line, exc.code, exc.detail, exc.reason, exc.expr_error)
            )
            continue
        taken.update(r.name for r in rules)
        result.rules.extend(rules)
    return result


def _parse(source: str | bytes, filename: str) -> tuple[_Module, ast.Module]:
    raw = source.encode("utf-8", "surrogatepass") if isinstance(source, str) else bytes(source)
    if len(raw) > MAX_SOURCE_BYTES:
        raise ToolsImportError(
            f"the file is {len(raw):,} bytes; at most {MAX_SOURCE_BYTES:,} are read",
            code="too-big",
            detail=str(MAX_SOURCE_BYTES),
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolsImportError("the file is not UTF-8 text", code="not-utf8") from None
    if "\x00" in text:
        raise ToolsImportError("the file contains a NUL character", code="nul")
    try:
        tree = ast.parse(text, filename=filename)
    except SyntaxError as exc:
        raise ToolsImportError(
            f"not valid Python: {exc.msg}", code="syntax", line=exc.lineno, detail=str(exc.msg)
        ) from None
    except (RecursionError, MemoryError):
        raise ToolsImportError(
            "the file is nested too deeply to be read", code="too-deep", detail=str(MAX_TREE_DEPTH)
        ) from None
    # Depth and size without recursion: the translation below recurses on the tree.
    count = 0
    stack: list[tuple[ast.AST, int]] = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        count += 1
        if depth > MAX_TREE_DEPTH:
            raise ToolsImportError(
                f"the syntax tree is deeper than {MAX_TREE_DEPTH} levels",
                code="too-deep",
                line=getattr(node, "lineno", None),
                detail=str(MAX_TREE_DEPTH),
            )
        if count > MAX_TREE_NODES:
            raise ToolsImportError(
                f"the syntax tree has more than {MAX_TREE_NODES:,} nodes",
                code="too-big",
                detail=str(MAX_TREE_NODES),
            )
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    lines = raw.split(b"\n")
    offsets, pos = [], 0
    for line in lines:
        offsets.append(pos)
        pos += len(line) + 1
    module = _Module(
        source=text,
        filename=filename,
        lines=lines,
        offsets=offsets,
        raw=raw,
        names={},
        functions={},
        compiled={},
        decorators=set(),
        ctx_names=set(),
    )
    for stmt in tree.body:
        for name in _bound_names(stmt):
            module.names.setdefault(name, stmt.lineno)
            if name in module.names and module.names[name] != stmt.lineno:
                module.names[name] = -1  # bound twice: never trusted
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            module.functions.setdefault(stmt.name, []).append(stmt)
        if isinstance(stmt, ast.ImportFrom) and stmt.level == 0:
            for alias in stmt.names:
                if stmt.module == "llamon_agent.tools" and alias.name == "deterministic_tool":
                    module.decorators.add(alias.asname or alias.name)
                if stmt.module == "llamon_agent.expr" and alias.name in ("compile_when", "compile_params"):
                    module.ctx_names.add(alias.asname or alias.name)
    for stmt in tree.body:
        if (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
            and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Name)
            and stmt.value.func.id in module.ctx_names
            and module.names.get(stmt.value.func.id) != -1
            and len(stmt.value.args) == 1
            and not stmt.value.keywords
            and isinstance(stmt.value.args[0], ast.Constant)
            and type(stmt.value.args[0].value) is str
            and module.names.get(stmt.targets[0].id) == stmt.lineno
        ):
            kind = "when" if _imported_name(tree, stmt.value.func.id) == "compile_when" else "params"
            module.compiled[stmt.targets[0].id] = (kind, stmt.value.args[0].value)
    return module, tree


def _imported_name(tree: ast.Module, local: str) -> str:
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom):
            for alias in stmt.names:
                if (alias.asname or alias.name) == local:
                    return alias.name
    return local


def _bound_names(stmt: ast.stmt) -> Iterator[str]:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        yield stmt.name
    elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
        for alias in stmt.names:
            yield (alias.asname or alias.name).split(".")[0]
    else:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                yield node.id
            elif isinstance(node, (ast.Global, ast.Nonlocal)):
                yield from node.names


def _tools_list(tree: ast.Module, result: ToolsImport) -> tuple[list[tuple[str, int]] | None, int]:
    """The names in ``DETERMINISTIC_TOOLS = [...]`` and the assignment's line; None without one."""
    found: list[ast.stmt] = [stmt for stmt in tree.body if "DETERMINISTIC_TOOLS" in set(_bound_names(stmt))]
    if not found:
        return None, 0
    stmt = found[0]
    value = stmt.value if isinstance(stmt, (ast.Assign, ast.AnnAssign)) else None
    if (
        len(found) > 1
        or value is None
        or not isinstance(value, (ast.List, ast.Tuple))
        or (isinstance(stmt, ast.Assign) and len(stmt.targets) != 1)
    ):
        raise ToolsImportError(
            "DETERMINISTIC_TOOLS must be assigned once, as a list of the routing functions' names",
            code="tools-list",
            line=(found[1] if len(found) > 1 else stmt).lineno,
        )
    names: list[tuple[str, int]] = []
    for element in value.elts:
        if not isinstance(element, ast.Name):
            raise ToolsImportError(
                "DETERMINISTIC_TOOLS must list function names only",
                code="tools-list",
                line=element.lineno,
            )
        names.append((element.id, element.lineno))
    return names, stmt.lineno
