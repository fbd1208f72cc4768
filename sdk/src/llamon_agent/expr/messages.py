"""The expression checker's messages: a stable id, an English template and its parameters.

The engine never imports a web framework and speaks English (its SDK users read ``str(exc)`` as
before); an :class:`~llamon_agent.expr.errors.ExprError` made from a :class:`Message` also carries
``msg_id`` and ``params``, so an application can show the same reason in its own language (the
workbench translates the id's template through its catalogue and fills in the same parameters).
Ids never change meaning; a new wording is a new id. Parameters are already text (names quoted with
``repr``, numbers formatted), so a translation only places them.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from llamon_agent.expr.limits import _NAMES_HINT

MESSAGES: dict[str, str] = {
    # the text and its tokens
    "expr.not_text": "the expression must be text",
    "expr.too_long": "the expression is longer than %(limit)s characters",
    "expr.empty": "the expression is empty",
    "expr.nul": "the expression contains a NUL character",
    "expr.bidi": "the expression contains an invisible text-direction character",
    "expr.brackets_too_deep": "brackets are nested more than %(limit)s levels deep",
    "expr.unmatched": "unmatched '%(bracket)s'",
    "expr.incomplete": "the expression is incomplete",
    "expr.syntax": "syntax error: %(detail)s",
    "expr.nested_too_deeply": "the expression is nested too deeply",
    "expr.too_big": "the expression is too big (more than %(limit)s parts)",
    "expr.too_deep": "the expression is nested more than %(limit)s levels deep",
    # what the allow-list refuses
    "expr.node_not_allowed": "this kind of expression (%(kind)s) is not allowed",
    "expr.lambda": "lambda is not allowed; use a helper or a comprehension",
    "expr.walrus": "the := operator is not allowed",
    "expr.star_unpacking": "* unpacking is not allowed",
    "expr.await": "await is not allowed",
    "expr.yield": "yield is not allowed",
    "expr.operator_not_allowed": "the %(operator)s operator is not allowed",
    "expr.bitor": "the | operator is not allowed; use or / .union()",
    "expr.bitand": "the & operator is not allowed; use and / .intersection()",
    "expr.any_operator": "this operator is not allowed",
    "expr.text_literal_too_long": "a text literal is longer than %(limit)s characters",
    "expr.int_too_large": "this number is too large (the limit is 64 bits)",
    "expr.number_too_large": "this number is too large",
    "expr.bytes": "bytes literals (b'...') are not allowed; use text",
    "expr.complex": "complex numbers are not allowed",
    "expr.literal_not_allowed": "the literal %(value)s is not allowed",
    "expr.format_spec": "format specs in f-strings (the part after ':') are not allowed",
    "expr.dict_unpacking": "** unpacking is not allowed",
    "expr.is_value": "use == to compare with a value; 'is' is for None, True and False",
    "expr.underscore_name": "name %(name)s is not allowed: names starting with '_' are reserved",
    "expr.data_get_value": "data_get can only be called, as data_get(key) or data_get(key, default)",
    "expr.helper_as_value": "%(name)s can only be called, as %(name)s(...)",
    "expr.sort_key": "key= can be one of %(keys)s",
    "expr.name_not_allowed": "name %(name)s is not allowed; " + _NAMES_HINT,
    "expr.name_not_allowed_close": "name %(name)s is not allowed; did you mean %(close)s? " + _NAMES_HINT,
    "expr.method_as_value": ".%(method)s() can only be called, not used as a value",
    "expr.underscore_attribute": "attribute %(name)s is not allowed: names starting with '_' are never reachable",
    "expr.format_method": '.%(method)s() is not allowed; use an f-string such as f"order {query}"',
    "expr.tool_attribute": (
        'attribute %(name)s is not allowed: the tools in ctx.mcp_tools are dicts, use t["%(attr)s"] '
        "(or tool_names for the names)"
    ),
    "expr.attribute_not_allowed": (
        "attribute %(name)s is not allowed; use ctx's fields (query, context, a2a_data, a2a_files, "
        "mcp_tools, tool_names) or an allowed method (see docs/expressions.md)"
    ),
    "expr.attribute_not_allowed_close": (
        "attribute %(name)s is not allowed; did you mean %(close)s? Use ctx's fields (query, context, "
        "a2a_data, a2a_files, mcp_tools, tool_names) or an allowed method (see docs/expressions.md)"
    ),
    "expr.not_callable": "%(name)s cannot be called; only helpers and methods can be called",
    "expr.call_not_allowed": "only helpers (such as contains_any) and methods (such as .get) can be called",
    "expr.keyword_not_allowed": "keyword argument %(name)s is not allowed",
    "expr.nested_comprehension": "comprehensions cannot be nested; use one level",
    "expr.comprehension_one_for": "a comprehension can have only one 'for'",
    "expr.async_comprehension": "async comprehensions are not allowed",
    "expr.comprehension_source": (
        "a comprehension must loop over request data: ctx, query, context, a2a_data, a2a_files, "
        "tool_names, something reached from them, or data_get(...) (with `or []` as a fallback); "
        "for a fixed list of words use contains_any(query, [...])"
    ),
    "expr.loop_variable_reserved": "%(name)s cannot be used as a loop variable",
    "expr.loop_variable": "a loop variable must be a name or a tuple of names",
    # params
    "expr.params_not_dict": 'params must give a dict such as {"q": query}',
    "expr.params_not_dict_value": 'params must give a dict such as {"q": query}, not %(type)s',
    "expr.params_too_large": "params would be larger than %(limit)s bytes",
    # rules
    "rule.name_identifier": (
        "the rule name %(name)s must be a Python identifier: letters, digits and _, not starting with a digit"
    ),
    "rule.name_keyword": "the rule name %(name)s is a Python keyword",
    "rule.name_too_long": "the rule name is longer than %(limit)s characters",
    "rule.field_empty": "%(field)s must be a non-empty text",
    "params.not_json_value": "params: %(path)s is %(value)s, which JSON cannot carry",
    "params.too_deep": "params: %(path)s is nested too deeply",
    "params.key_not_text": "params: the key %(key)s in %(path)s is not a text; keys must be texts",
    "params.not_json_type": "params: %(path)s is a %(type)s, which JSON cannot carry",
    "explain.operand_failed": "an operand failed",
    # at run time (helpers, the cost budget, the request data, Python failures: their text is the detail)
    "run.words_text": '%(helper)s(text, words): words must be a list such as ["a", "b"], not a text',
    "run.words_type": "%(helper)s(text, words): words must be a list of texts, not %(type)s",
    "run.text_type": "%(helper)s: the text must be a text or None, not %(type)s",
    "run.word_type": "%(helper)s(text, words): every word must be a text, not %(type)s",
    "run.regex_type": "a regular expression must be a text, not %(type)s",
    "run.regex_too_long": "the regular expression is longer than %(limit)s characters",
    "run.regex_quota": "this request has compiled as many new regular expressions as it may",
    "run.regex_group": "re_find: the pattern %(pattern)s has no group %(group)s",
    "run.int_too_large": "the integer result is too large (the limit is 64 bits)",
    "run.text_too_long": "the text would be longer than %(limit)s characters",
    "run.list_too_long": "the list would have more than %(limit)s items",
    "run.cannot_add": "cannot add %(left)s and %(right)s",
    "run.repeat": "repeating a text or list with * is not allowed",
    "run.cannot_multiply": "cannot multiply %(left)s and %(right)s",
    "run.percent_format": '%% formatting is not allowed; use an f-string such as f"order {query}"',
    "run.cannot_mod": "cannot compute %(left)s %% %(right)s",
    "run.no_join": "%(type)s has no method join()",
    "run.join_args": "join() takes one argument: the list of texts",
    "run.join_list": "join() needs a list of texts, not %(type)s",
    "run.join_too_many": "join() was given more than %(limit)s items",
    "run.join_texts": "join() needs texts, got %(type)s",
    "run.no_replace": "%(type)s has no method replace()",
    "run.replace_args": "replace() takes the old text, the new text and optionally a count",
    "run.replace_types": "replace(old, new, count): old and new must be texts, count a number",
    "run.only_data_text": "only data (text, numbers, true/false, None, lists, dicts) can become text",
    "run.loop_none": "cannot loop over None; use `or []` when it may be missing",
    "run.cannot_loop": "cannot loop over %(type)s",
    "run.loop_too_many": "cannot loop over more than %(limit)s items",
    "run.sum_numbers": "sum() adds numbers only",
    "run.sum_type": "sum() adds numbers only, got %(type)s",
    "run.round_digits": "round(number, ndigits): ndigits must be a whole number between -100 and 100",
    "run.budget": "cost budget of %(limit)s units exceeded: the expression does too much work (see the cost table in docs/expressions.md)",
    "expr.cost_bound": "this expression may cost up to %(units)s units on a request within the caps, over the limit of %(limit)s units a rule: %(part)s costs up to %(part_units)s units (see the cost table in docs/expressions.md)",
    "rule.cost_bound": "when and params together may cost up to %(units)s units on a request within the caps, over the limit of %(limit)s units a rule",
    "rules.cost_total": "the rules together may cost up to %(units)s units on one request within the caps, over the limit of %(limit)s units a request; the costliest: %(rules)s",
    "run.data_too_large": "the request data is larger than %(limit)s bytes",
    "run.data_too_deep": "the request data is nested more than %(limit)s levels deep",
    "run.too_many_parts": "the request has more than %(limit)s DataParts or FileParts",
    "run.files_too_large": "the request's FileParts are larger than %(limit)s bytes",
    "run.query_too_long": "the query is longer than %(limit)s characters",
    "run.context_type": "ctx.context must be a dict, not %(type)s",
    "run.key_missing": "key %(key)s is missing; use .get(%(key)s) for optional keys",
    "run.index": "%(detail)s; check len() first",
    "run.zero_division": "division by zero",
    "run.data_nested": "the data is nested too deeply",
    "run.out_of_memory": "out of memory",
    "run.attribute": "%(detail)s",
    "run.wrong_type": "wrong type: %(detail)s",
    "run.too_many_digits": "the number has too many digits",
    "run.wrong_value": "wrong value: %(detail)s",
    "run.overflow": "number too large: %(detail)s",
    "run.other": "%(kind)s: %(detail)s",
    "expr.cannot_compile_detail": "the expression cannot be compiled: %(detail)s",
    "expr.cannot_compile": "the expression cannot be compiled",
}


class Message:
    """One message: its id and parameters; ``str()`` is the English text."""

    __slots__ = ("msg_id", "params")

    def __init__(self, msg_id: str, **params: object) -> None:
        if msg_id not in MESSAGES:
            raise KeyError(f"no message {msg_id!r}")
        self.msg_id = msg_id
        self.params = {key: str(value) for key, value in params.items()}

    def __str__(self) -> str:
        return MESSAGES[self.msg_id] % self.params

    def __repr__(self) -> str:
        return f"Message({self.msg_id!r}, **{self.params!r})"


def close_matches(word: str, candidates: Iterable[str], n: int = 3) -> list[str]:
    """The known names closest to a mistyped one (for "did you mean"), best first."""
    return difflib.get_close_matches(word, sorted(set(candidates)), n=n, cutoff=0.75)


def quoted_list(names: Iterable[str]) -> str:
    """'a', 'b', 'c': quoted names, in any language."""
    return ", ".join(repr(name) for name in names)
