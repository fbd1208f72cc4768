"""An ``app/tools.py`` read back as routing rules (``when`` / ``params`` expressions).

The module is untrusted input: it is parsed, never imported or run. Its size and the depth of
its syntax tree are capped before anything else is done with it.

Which functions: those listed in ``DETERMINISTIC_TOOLS`` in that order (the pre-step's order),
then the ``@deterministic_tool`` functions left out of the list, as disabled rules (they never
run in the project either). Without a ``DETERMINISTIC_TOOLS`` list, every decorated function in
source order.

What translates: a body made of an optional docstring, ``pass``, locals assigned once, ``if`` /
``elif`` / ``else`` (nested, also choosing a local's value), ``return None`` (or falling off the
end), ``return {"tool_name": "<literal>", "params": <expression>}``, loops over the DataParts
(``_loops``: ``for v in <iterable>: if <test>: return <call>``, which becomes ``any(<test> for v in
<iterable>)`` and reads the first match's values as ``[v for v in ... if <test>][0]``; ``x = <before>``
then ``for v in ...: if <test>: x = <value>`` for the last match, with ``break`` the first), and calls
of pure module-level helpers (``def h(a): return <expression of a>``), put in place. Conditions
and params use ``ctx.query``, ``ctx.context``, ``ctx.a2a_data``, ``ctx.a2a_files``,
``ctx.mcp_tools`` (in a comprehension, where ``t.name`` becomes ``t["name"]``, or in ``len()``),
the builtins the expression language has and the methods it allows. ``{t.name for t in
ctx.mcp_tools}`` becomes ``tool_names``; ``any(w in ctx.query for w in ("a", "b"))`` becomes
``contains_any(ctx.query, ("a", "b"))`` (``all`` gives ``contains_all``). A module exported by
llamon-web (``compile_when("...")`` / ``compile_params("...")``) reads back to its own
expressions, character for character.

How the behaviour is kept exactly: the body is read into a decision tree (each ``if`` a branch,
each ``return`` a leaf). A rule's ``when`` is that tree written as one expression that is true
exactly on the leaves returning the rule's tool, evaluating the same conditions in the same
order as the function (``c and X``, ``not c or X``, ``X if c else Y``), so it also fails where
the function fails. A local is replaced by its expression where it is used; when evaluating it
could fail (``ctx.context["k"]``), ``((<expr>) is None or True) and ...`` keeps the failure at
the point of the assignment. A function returning several tools becomes one rule per tool, in
order of their first ``return``; at most one of them fires for a request, as the function makes
at most one call. ``params`` is the tree restricted to the rule's leaves.

What does not translate is listed with the file, the line and the reason (:class:`Untranslatable`):
calls of other functions (and of helpers that read globals or get an argument that could fail),
module-level names (globals, imports), loops other than the ones above (or whose test could fail
on a later part when the function stops at the first),
``try``/``with``/``raise``/``import``, locals assigned twice, returned values of another shape,
and whatever the expression checker refuses (its message is the reason).

The pieces: ``_reader`` (the module as a whole), ``_function`` (one function), ``_tree`` (the
decision tree and expression text), ``_model`` (limits, results, errors).
"""

from __future__ import annotations

from llamon_agent.tools_import._model import (
    MAX_LEAVES,
    MAX_MODULE_PATHS,
    MAX_SOURCE_BYTES,
    MAX_STATEMENTS,
    MAX_TREE_DEPTH,
    MAX_TREE_NODES,
    RULESET_FORMAT,
    ImportedRule,
    ToolsImport,
    ToolsImportError,
    Untranslatable,
)
from llamon_agent.tools_import._reader import translate_tools_module

__all__ = [
    "ImportedRule",
    "MAX_LEAVES",
    "MAX_MODULE_PATHS",
    "MAX_SOURCE_BYTES",
    "MAX_STATEMENTS",
    "MAX_TREE_DEPTH",
    "MAX_TREE_NODES",
    "RULESET_FORMAT",
    "ToolsImport",
    "ToolsImportError",
    "Untranslatable",
    "translate_tools_module",
]
