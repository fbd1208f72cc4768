"""The rewrite of data-dependent operations into size-checked, metered hidden helpers, and compiling to bytecode."""

from __future__ import annotations

import ast
import copy
import types
import warnings

from llamon_agent.expr.budget import (
    _AFFIX_METHODS,
    _COMPARE_INDEX,
    _FREE_METHODS,
    _METER,
    _METERED_CALLS,
)
from llamon_agent.expr.errors import ExprError
from llamon_agent.expr.hints import _query_ref, is_ctx_name
from llamon_agent.expr.limits import _FILENAME, _GUARDED_METHODS
from llamon_agent.expr.messages import Message as M


def _meter_name(like: ast.AST) -> ast.Name:
    return ast.copy_location(ast.Name(id=_METER, ctx=ast.Load()), like)


def _is_query(node: ast.AST) -> bool:
    """``query`` or ``ctx.query``: always the request's text (the names cannot be rebound)."""
    return _query_ref(node) is False


def _is_dict_or_set(node: ast.AST) -> bool:
    """``context``/``ctx.context`` (a dict) or ``tool_names`` (a set): ``in`` is a hash lookup."""
    return is_ctx_name(node, "tool_names") or is_ctx_name(node, "context")


def _scalar(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) in (str, int, float, bool, type(None))


_NUMBER_OPS = (ast.Mult, ast.Mod, ast.Div, ast.FloorDiv)  # numbers only (helpers check * and %)
_NUMBER_CALLS = frozenset({"len", "abs", "round", "int", "float", "bool"})


def _small(node: ast.AST) -> bool:
    """A literal scalar, or a value that can only be a number or a bool (or raise): comparing it
    with anything takes constant time (another type differs at once)."""
    if _scalar(node) or isinstance(node, (ast.UnaryOp, ast.Compare)):
        return True
    if isinstance(node, ast.BinOp):
        return isinstance(node.op, _NUMBER_OPS)
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _NUMBER_CALLS


def _scalars(node: ast.AST) -> bool:
    """A literal list or tuple of texts, numbers, booleans or None."""
    return isinstance(node, (ast.List, ast.Tuple)) and all(_scalar(e) for e in node.elts)


def _static_pair(left: ast.AST, op: ast.cmpop, right: ast.AST, typed: bool = True) -> int | None:
    """Query reads one comparison costs when that is known from its shape, else None.

    Comparing with a literal text or number reads at most the literal; ``is`` reads nothing;
    ``"w" in query`` reads the query once (``query.lower()``: once more to build the copy, at
    the building rate); ``"w" in context`` hashes the literal; ``x in ["a", 1]`` compares x
    with each literal, at most the literal's length each (a value of another type or length
    differs at once). These stay plain Python, their reads of literals counted as their nodes.
    """
    if isinstance(op, (ast.Is, ast.IsNot)):
        return 0
    if isinstance(op, (ast.In, ast.NotIn)):
        if typed and _scalars(right):
            return 0
        if not _scalar(left):
            return None
        if _query_ref(right) is not None:  # query.lower() is made once per request (LOWERED)
            return 1
        return 0 if _is_dict_or_set(right) else None
    if typed:
        return 0 if _small(left) or _small(right) else None
    return 0 if _scalar(left) or _scalar(right) else None


def _affix(args: list[ast.expr]) -> bool:
    """One literal text, or a literal tuple of texts: what startswith/endswith read is their length."""
    if len(args) != 1:
        return False
    texts = args[0].elts if isinstance(args[0], ast.Tuple) else args
    return all(isinstance(t, ast.Constant) and type(t.value) is str for t in texts)


# The request's first value of each DataPart key, made once per request (build_namespace):
# data_get("amount", 0) is one dict lookup.
FIRST = "__llamon_first"

# The request's text, as literal tests read it (namespace.build_namespace): the query itself
# when it is short, else a table of which literals it holds, made once per request.
IN_QUERY = "__llamon_in_query"
IN_LOWERED = "__llamon_in_lowered"
LOWERED = "__llamon_lowered"  # query.lower(), made once per request


def _literal_tests(node: ast.Call) -> ast.expr | None:
    """``contains_any/contains_all(query or query.lower(), [literal texts])`` as the ``or``/``and``
    of ``"w" in query`` tests it means (the same bool, never raising), else None."""
    func = node.func
    if not (isinstance(func, ast.Name) and func.id in ("contains_any", "contains_all")):
        return None
    if node.keywords or len(node.args) != 2:
        return None
    text, words = node.args
    if _query_ref(text) is None or not isinstance(words, (ast.List, ast.Tuple, ast.Set)):
        return None
    if not all(isinstance(w, ast.Constant) and type(w.value) is str for w in words.elts):
        return None
    any_of = func.id == "contains_any"
    if not words.elts:
        return ast.copy_location(ast.Constant(value=not any_of), node)
    tests: list[ast.expr] = [
        ast.copy_location(
            ast.Compare(left=word, ops=[ast.In()], comparators=[copy.copy(text)]),
            word,
        )
        for word in words.elts
    ]
    if len(tests) == 1:
        return tests[0]
    return ast.copy_location(ast.BoolOp(op=ast.Or() if any_of else ast.And(), values=tests), node)


class _Guard(ast.NodeTransformer):
    """Route data-dependent operations through the hidden helpers: size-checked and metered.

    Also counts the static cost that ExpressionRule charges to the request per evaluation:
    ``nodes`` (every node of the tree runs at most once outside a comprehension body) and
    ``scans`` (query reads of the plain comparisons above); a comprehension's body is charged
    per item, to the evaluation's own budget.
    """

    def __init__(self, meter_all: bool = False) -> None:
        self.meter_all = meter_all  # the previous rewrite, every data-dependent operation metered
        self.scans = 0
        self.metered = False  # whether any operation charges the meter at run time
        self._in_body = False
        self._body_scans = 0

    @staticmethod
    def _call(name: str, args: list[ast.expr], keywords: list[ast.keyword], like: ast.AST) -> ast.Call:
        func = ast.copy_location(ast.Name(id=name, ctx=ast.Load()), like)
        return ast.copy_location(ast.Call(func=func, args=args, keywords=keywords), like)

    def _metered(
        self, name: str, args: list[ast.expr], keywords: list[ast.keyword], like: ast.AST
    ) -> ast.Call:
        self.metered = True
        return self._call(name, [_meter_name(like), *args], keywords, like)

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, ast.Add):
            return self._metered("__llamon_add", [node.left, node.right], [], node)
        if isinstance(node.op, ast.Mult):  # numbers only, within 64 bits: constant cost
            return self._call("__llamon_mul", [node.left, node.right], [], node)
        if isinstance(node.op, ast.Mod):
            return self._call("__llamon_mod", [node.left, node.right], [], node)
        return node  # - / // on numbers cannot build anything bigger than their operands

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        self.generic_visit(node)
        if not isinstance(node.slice, ast.Slice):
            return node  # an index or a key: constant cost
        bounds = [
            part if part is not None else ast.copy_location(ast.Constant(value=None), node)
            for part in (node.slice.lower, node.slice.upper, node.slice.step)
        ]
        return self._metered("__llamon_slice", [node.value, *bounds], [], node)

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        operands = [node.left, *node.comparators]
        typed = not self.meter_all
        costs = [_static_pair(operands[i], op, operands[i + 1], typed) for i, op in enumerate(node.ops)]
        if all(cost is not None for cost in costs):
            self._count_reads(sum(costs))  # type: ignore[arg-type]
            right = node.comparators[-1]
            if (
                len(node.ops) == 1
                and isinstance(node.ops[0], (ast.In, ast.NotIn))
                and isinstance(node.left, ast.Constant)
                and type(node.left.value) is str
                and _query_ref(right) is not None
            ):  # "w" in query: the request's table of literals (or the query when it is short)
                name = IN_LOWERED if _query_ref(right) else IN_QUERY
                node.comparators = [ast.copy_location(ast.Name(id=name, ctx=ast.Load()), right)]
                return node
            node.left = self.visit(node.left)
            node.comparators = [self.visit(c) for c in node.comparators]
            return node
        self.generic_visit(node)
        if len(node.ops) == 1:
            op = ast.copy_location(ast.Constant(value=_COMPARE_INDEX[type(node.ops[0])]), node)
            if not isinstance(node.ops[0], (ast.Is, ast.IsNot)):
                return self._metered("__llamon_cmp", [node.left, node.comparators[0], op], [], node)
        weigh = [
            part if _scalar(part) else self._metered("__llamon_weigh", [part], [], part)
            for part in (node.left, *node.comparators)
        ]
        node.left, node.comparators = weigh[0], weigh[1:]
        return node

    def _count_reads(self, reads: int) -> None:
        if self._in_body:
            self._body_scans += reads
        else:
            self.scans += reads

    def visit_Call(self, node: ast.Call) -> ast.AST:
        tests = _literal_tests(node)
        if tests is not None:  # contains_any(query, ["a", "b"]): the keyword hot path stays plain
            visited: ast.AST = self.visit(tests)
            return visited
        if _query_ref(node) is True:  # query.lower(): made once per request
            return ast.copy_location(ast.Name(id=LOWERED, ctx=ast.Load()), node)
        self.generic_visit(node)
        func = node.func
        if isinstance(func, ast.Name):
            if func.id == "data_get":
                if (
                    not (self.meter_all or node.keywords)
                    and 1 <= len(node.args) <= 2
                    and _scalar(node.args[0])
                ):
                    # a literal key: one lookup in the request's first value of each key (FIRST)
                    first = ast.copy_location(ast.Name(id=FIRST, ctx=ast.Load()), func)
                    node.func = ast.copy_location(
                        ast.Attribute(value=first, attr="get", ctx=ast.Load()), func
                    )
                    return node
                parts = ast.copy_location(ast.Name(id="a2a_data", ctx=ast.Load()), func)
                return self._metered("__llamon_data_get", [parts, *node.args], node.keywords, node)
            if func.id in _METERED_CALLS:
                return self._metered(f"__llamon_m_{func.id}", node.args, node.keywords, node)
            return node  # len, bool, abs, round: constant cost
        if isinstance(func, ast.Attribute):
            if func.attr in _GUARDED_METHODS:
                return self._metered(
                    _GUARDED_METHODS[func.attr], [func.value, *node.args], node.keywords, node
                )
            if func.attr in _AFFIX_METHODS and not (self.meter_all or node.keywords) and _affix(node.args):
                return node  # x.startswith("urgent"): reads at most the literal
            if func.attr not in _FREE_METHODS:
                name = ast.copy_location(ast.Constant(value=func.attr), func)
                return self._metered("__llamon_method", [func.value, name, *node.args], node.keywords, node)
        return node

    def visit_JoinedStr(self, node: ast.JoinedStr) -> ast.AST:
        # f"{a}{b}..." as one size-checked call: many parts, each a big value, add up.
        self.generic_visit(node)
        args: list[ast.expr] = []
        for part in node.values:
            if isinstance(part, ast.FormattedValue):
                helper = {114: "__llamon_repr", 97: "__llamon_ascii"}.get(part.conversion, "__llamon_str")
                args.append(self._metered(helper, [part.value], [], part))
            else:
                args.append(part)
        return self._metered("__llamon_fstr", args, [], node)

    def _comprehension(
        self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp, body: list[ast.AST]
    ) -> ast.AST:
        gen = node.generators[0]
        nodes = sum(1 for part in [*body, gen.target, *gen.ifs] for _ in ast.walk(part))
        gen.iter = self.visit(gen.iter)  # evaluated once, before the loop
        self._in_body, self._body_scans = True, 0
        try:
            gen.target = self.visit(gen.target)
            gen.ifs = [self.visit(cond) for cond in gen.ifs]
            for field in ("elt", "key", "value"):
                if hasattr(node, field):
                    setattr(node, field, self.visit(getattr(node, field)))
        finally:
            self._in_body = False
        per_item = [ast.copy_location(ast.Constant(value=v), gen.iter) for v in (nodes, self._body_scans)]
        gen.iter = self._metered("__llamon_iter", [gen.iter, *per_item], [], gen.iter)
        return node

    def visit_ListComp(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp) -> ast.AST:
        return self._comprehension(node, [node.elt])

    visit_SetComp = visit_ListComp
    visit_GeneratorExp = visit_ListComp

    def visit_DictComp(self, node: ast.DictComp) -> ast.AST:
        return self._comprehension(node, [node.key, node.value])


class _Lift(ast.NodeTransformer):
    """Text and number literals (the given nodes) become the function's arguments
    ``__llamon_k<i>``: the code then depends on the expression's shape only, and rules that
    differ by their literals share it (see ``shapes``). Their values come back as the
    function's defaults."""

    def __init__(self, lift: dict[int, int]) -> None:
        self.lift = lift

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        index = self.lift.get(id(node))
        if index is None:
            return node
        return ast.copy_location(ast.Name(id=f"__llamon_k{index}", ctx=ast.Load()), node)


# What an expression reads of one request, in the order its function takes them: the namespace's
# per-request names (namespace.build_namespace). Everything else it names (helpers, builtins) is
# the same for every request and read from the function's globals, budget._BASE_NAMESPACE. So
# each expression is one function made when it is compiled, called with the request's values
# (no function object made per evaluation), and those names are fast locals in its code.
REQUEST_NAMES = (
    "ctx",
    "query",
    "context",
    "a2a_data",
    "a2a_files",
    "tool_names",
    LOWERED,
    FIRST,
    IN_QUERY,
    IN_LOWERED,
    _METER,
)


def _compile(
    tree: ast.Expression, name: str, lift: dict[int, int] | None = None, meter_all: bool = False
) -> tuple[types.CodeType, int, int, bool]:
    """The expression as the code of a function of the request's values (REQUEST_NAMES, in that
    order), with its static cost and whether it charges the meter: (code, nodes, query scans,
    metered), see :class:`_Guard`. ``lift`` maps ``id()`` of literals of ``tree`` to the
    index of the argument they become (:class:`_Lift`), given as defaults when it runs."""
    nodes = sum(1 for _ in ast.walk(tree.body))
    guard = _Guard(meter_all)
    body = guard.visit(tree).body
    params = [ast.arg(arg=arg) for arg in REQUEST_NAMES]
    if lift:
        body = _Lift(lift).visit(body)
        params += [ast.arg(arg=f"__llamon_k{i}") for i in range(len(lift))]
    func = ast.FunctionDef(
        name=name,
        args=ast.arguments(
            posonlyargs=[], args=params, vararg=None, kwonlyargs=[], kw_defaults=[], defaults=[]
        ),
        body=[ast.copy_location(ast.Return(value=body), body)],
        decorator_list=[],
        returns=None,
        type_comment=None,
    )
    module = ast.Module(body=[ast.copy_location(func, body)], type_ignores=[])
    ast.fix_missing_locations(module)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # compile-time SyntaxWarnings would only reach the log
            code = compile(module, _FILENAME, "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise ExprError(M("expr.cannot_compile_detail", detail=exc)) from None
    for const in code.co_consts:
        if isinstance(const, types.CodeType) and const.co_name == name:
            return const, nodes, guard.scans, guard.metered
    raise ExprError(M("expr.cannot_compile"))  # pragma: no cover - compile() always emits it
