"""The expression checker's messages in the user's language: one function every route calls.

The engine (llamon_agent, which never imports Django) raises ExprError with a stable ``msg_id`` and
its ``params`` beside the English ``reason`` (sdk/src/llamon_agent/expr/messages.py). Here each id has the
same English template marked for translation; :func:`expr_reason` translates an error's reason and
:func:`expr_text` adds its field and place, for forms, the REST API and the MCP endpoint (through
rules.services), the expression editor and imports. An error without an id (a runtime failure of a
helper) keeps its English reason, except the ones :func:`engine_text` knows (an invalid regular
expression, an unknown tool); Python's syntax-error details go through core.library_messages. tests/rules/test_expr_messages.py checks that both tables agree.
"""

from __future__ import annotations

import re

from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from core.library_messages import engine_regex_text, library_text, syntax_detail
from llamon_agent.expr import ExprError
from llamon_agent.expr.messages import MESSAGES as ENGINE_MESSAGES

EXPR_MESSAGES = {
    "expr.not_text": _("the expression must be text"),
    "expr.too_long": _("the expression is longer than %(limit)s characters"),
    "expr.empty": _("the expression is empty"),
    "expr.nul": _("the expression contains a NUL character"),
    "expr.bidi": _("the expression contains an invisible text-direction character"),
    "expr.brackets_too_deep": _("brackets are nested more than %(limit)s levels deep"),
    "expr.unmatched": _("unmatched '%(bracket)s'"),
    "expr.incomplete": _("the expression is incomplete"),
    "expr.syntax": _("syntax error: %(detail)s"),
    "expr.nested_too_deeply": _("the expression is nested too deeply"),
    "expr.too_big": _("the expression is too big (more than %(limit)s parts)"),
    "expr.too_deep": _("the expression is nested more than %(limit)s levels deep"),
    "expr.node_not_allowed": _("this kind of expression (%(kind)s) is not allowed"),
    "expr.lambda": _("lambda is not allowed; use a helper or a comprehension"),
    "expr.walrus": _("the := operator is not allowed"),
    "expr.star_unpacking": _("* unpacking is not allowed"),
    "expr.await": _("await is not allowed"),
    "expr.yield": _("yield is not allowed"),
    "expr.operator_not_allowed": _("the %(operator)s operator is not allowed"),
    "expr.bitor": _("the | operator is not allowed; use or / .union()"),
    "expr.bitand": _("the & operator is not allowed; use and / .intersection()"),
    "expr.any_operator": _("this operator is not allowed"),
    "expr.text_literal_too_long": _("a text literal is longer than %(limit)s characters"),
    "expr.int_too_large": _("this number is too large (the limit is 64 bits)"),
    "expr.number_too_large": _("this number is too large"),
    "expr.bytes": _("bytes literals (b'...') are not allowed; use text"),
    "expr.complex": _("complex numbers are not allowed"),
    "expr.literal_not_allowed": _("the literal %(value)s is not allowed"),
    "expr.format_spec": _("format specs in f-strings (the part after ':') are not allowed"),
    "expr.dict_unpacking": _("** unpacking is not allowed"),
    "expr.is_value": _("use == to compare with a value; 'is' is for None, True and False"),
    "expr.underscore_name": _("name %(name)s is not allowed: names starting with '_' are reserved"),
    "expr.data_get_value": _("data_get can only be called, as data_get(key) or data_get(key, default)"),
    "expr.helper_as_value": _("%(name)s can only be called, as %(name)s(...)"),
    "expr.sort_key": _("key= can be one of %(keys)s"),
    "expr.name_not_allowed": _(
        "name %(name)s is not allowed; use ctx, query, context, a2a_data, a2a_files, tool_names or a helper"
    ),
    "expr.name_not_allowed_close": _(
        "name %(name)s is not allowed; did you mean %(close)s? use ctx, query, context, a2a_data, a2a_files, tool_names or a helper"
    ),
    "expr.method_as_value": _(".%(method)s() can only be called, not used as a value"),
    "expr.underscore_attribute": _(
        "attribute %(name)s is not allowed: names starting with '_' are never reachable"
    ),
    "expr.format_method": _('.%(method)s() is not allowed; use an f-string such as f"order {query}"'),
    "expr.tool_attribute": _(
        'attribute %(name)s is not allowed: the tools in ctx.mcp_tools are dicts, use t["%(attr)s"] (or tool_names for the names)'
    ),
    "expr.attribute_not_allowed": _(
        "attribute %(name)s is not allowed; use ctx's fields (query, context, a2a_data, a2a_files, mcp_tools, tool_names) or an allowed method (see docs/expressions.md)"
    ),
    "expr.attribute_not_allowed_close": _(
        "attribute %(name)s is not allowed; did you mean %(close)s? Use ctx's fields (query, context, a2a_data, a2a_files, mcp_tools, tool_names) or an allowed method (see docs/expressions.md)"
    ),
    "expr.not_callable": _("%(name)s cannot be called; only helpers and methods can be called"),
    "expr.call_not_allowed": _(
        "only helpers (such as contains_any) and methods (such as .get) can be called"
    ),
    "expr.keyword_not_allowed": _("keyword argument %(name)s is not allowed"),
    "expr.nested_comprehension": _("comprehensions cannot be nested; use one level"),
    "expr.comprehension_one_for": _("a comprehension can have only one 'for'"),
    "expr.async_comprehension": _("async comprehensions are not allowed"),
    "expr.comprehension_source": _(
        "a comprehension must loop over request data: ctx, query, context, a2a_data, a2a_files, tool_names, something reached from them, or data_get(...) (with `or []` as a fallback); for a fixed list of words use contains_any(query, [...])"
    ),
    "expr.loop_variable_reserved": _("%(name)s cannot be used as a loop variable"),
    "expr.loop_variable": _("a loop variable must be a name or a tuple of names"),
    "expr.params_not_dict": _('params must give a dict such as {"q": query}'),
    "expr.params_not_dict_value": _('params must give a dict such as {"q": query}, not %(type)s'),
    "expr.params_too_large": _("params would be larger than %(limit)s bytes"),
    "rule.name_identifier": _(
        "the rule name %(name)s must be a Python identifier: letters, digits and _, not starting with a digit"
    ),
    "rule.name_keyword": _("the rule name %(name)s is a Python keyword"),
    "rule.name_too_long": _("the rule name is longer than %(limit)s characters"),
    "rule.field_empty": _("%(field)s must be a non-empty text"),
    "run.words_text": _('%(helper)s(text, words): words must be a list such as ["a", "b"], not a text'),
    "run.words_type": _("%(helper)s(text, words): words must be a list of texts, not %(type)s"),
    "run.text_type": _("%(helper)s: the text must be a text or None, not %(type)s"),
    "run.word_type": _("%(helper)s(text, words): every word must be a text, not %(type)s"),
    "run.regex_type": _("a regular expression must be a text, not %(type)s"),
    "run.regex_too_long": _("the regular expression is longer than %(limit)s characters"),
    "run.regex_quota": _("this request has compiled as many new regular expressions as it may"),
    "run.regex_group": _("re_find: the pattern %(pattern)s has no group %(group)s"),
    "run.int_too_large": _("the integer result is too large (the limit is 64 bits)"),
    "params.not_json_value": _("params: %(path)s is %(value)s, which JSON cannot carry"),
    "params.too_deep": _("params: %(path)s is nested too deeply"),
    "params.key_not_text": _("params: the key %(key)s in %(path)s is not a text; keys must be texts"),
    "params.not_json_type": _("params: %(path)s is a %(type)s, which JSON cannot carry"),
    "explain.operand_failed": _("an operand failed"),
    "run.text_too_long": _("the text would be longer than %(limit)s characters"),
    "run.list_too_long": _("the list would have more than %(limit)s items"),
    "run.cannot_add": _("cannot add %(left)s and %(right)s"),
    "run.repeat": _("repeating a text or list with * is not allowed"),
    "run.cannot_multiply": _("cannot multiply %(left)s and %(right)s"),
    "run.percent_format": _('%% formatting is not allowed; use an f-string such as f"order {query}"'),
    "run.cannot_mod": _("cannot compute %(left)s %% %(right)s"),
    "run.no_join": _("%(type)s has no method join()"),
    "run.join_args": _("join() takes one argument: the list of texts"),
    "run.join_list": _("join() needs a list of texts, not %(type)s"),
    "run.join_too_many": _("join() was given more than %(limit)s items"),
    "run.join_texts": _("join() needs texts, got %(type)s"),
    "run.no_replace": _("%(type)s has no method replace()"),
    "run.replace_args": _("replace() takes the old text, the new text and optionally a count"),
    "run.replace_types": _("replace(old, new, count): old and new must be texts, count a number"),
    "run.only_data_text": _("only data (text, numbers, true/false, None, lists, dicts) can become text"),
    "run.loop_none": _("cannot loop over None; use `or []` when it may be missing"),
    "run.cannot_loop": _("cannot loop over %(type)s"),
    "run.loop_too_many": _("cannot loop over more than %(limit)s items"),
    "run.sum_numbers": _("sum() adds numbers only"),
    "run.sum_type": _("sum() adds numbers only, got %(type)s"),
    "run.round_digits": _("round(number, ndigits): ndigits must be a whole number between -100 and 100"),
    "run.budget": _(
        "cost budget of %(limit)s units exceeded: the expression does too much work (see the cost table in docs/expressions.md)"
    ),
    "expr.cost_bound": _(
        "this expression may cost up to %(units)s units on a request within the caps, over the limit of %(limit)s units a rule: %(part)s costs up to %(part_units)s units (see the cost table in docs/expressions.md)"
    ),
    "rule.cost_bound": _(
        "when and params together may cost up to %(units)s units on a request within the caps, over the limit of %(limit)s units a rule"
    ),
    "rules.cost_total": _(
        "the rules together may cost up to %(units)s units on one request within the caps, over the limit of %(limit)s units a request; the costliest: %(rules)s"
    ),
    "run.data_too_large": _("the request data is larger than %(limit)s bytes"),
    "run.data_too_deep": _("the request data is nested more than %(limit)s levels deep"),
    "run.too_many_parts": _("the request has more than %(limit)s DataParts or FileParts"),
    "run.files_too_large": _("the request's FileParts are larger than %(limit)s bytes"),
    "run.query_too_long": _("the query is longer than %(limit)s characters"),
    "run.context_type": _("ctx.context must be a dict, not %(type)s"),
    "run.key_missing": _("key %(key)s is missing; use .get(%(key)s) for optional keys"),
    "run.index": _("%(detail)s; check len() first"),
    "run.zero_division": _("division by zero"),
    "run.data_nested": _("the data is nested too deeply"),
    "run.out_of_memory": _("out of memory"),
    "run.attribute": _("%(detail)s"),
    "run.wrong_type": _("wrong type: %(detail)s"),
    "run.too_many_digits": _("the number has too many digits"),
    "run.wrong_value": _("wrong value: %(detail)s"),
    "run.overflow": _("number too large: %(detail)s"),
    "run.other": _("%(kind)s: %(detail)s"),
    "expr.cannot_compile_detail": _("the expression cannot be compiled: %(detail)s"),
    "expr.cannot_compile": _("the expression cannot be compiled"),
}


def expr_reason(exc: ExprError) -> str:
    """Why the expression was refused, in the active language (English without a known id)."""
    template = EXPR_MESSAGES.get(exc.msg_id or "")
    if template is None:
        return engine_text(exc.reason)
    params = exc.params
    if exc.msg_id == "expr.syntax" and isinstance(params.get("detail"), str):
        params = {**params, "detail": syntax_detail(params["detail"])}  # Python's own words
    if exc.msg_id == "run.wrong_type":
        compared = _COMPARE.fullmatch(str(params.get("detail", "")))
        if compared:  # Python's half-English "'<' not supported between instances of 'str' and 'int'"
            op, left, right = compared.groups()
            return gettext(
                "cannot compare %(left)s with %(right)s using %(op)s; a DataPart value may arrive as "
                'text (such as "86"): convert it with to_number(value, default)'
            ) % {"left": _type_name(left), "right": _type_name(right), "op": op}
    if exc.msg_id in PYTHON_DETAIL and isinstance(params.get("detail"), str):
        params = {**params, "detail": python_detail(params["detail"])}
    try:
        return str(template) % params
    except (KeyError, ValueError, TypeError):  # a translation that lost a parameter: the English
        return exc.reason


_COMPARE = re.compile(r"'([<>]=?)' not supported between instances of '(\w+)' and '(\w+)'")

# The messages whose parameter is Python's own text (a TypeError's, a ValueError's ...).
PYTHON_DETAIL = frozenset(
    {"run.index", "run.attribute", "run.wrong_type", "run.wrong_value", "run.overflow", "run.other"}
)
# Python's TypeErrors that rules meet on request data, in the user's language.
_PYTHON_TYPE_ERRORS = [
    (
        re.compile(r"argument of type '(?P<type>\w+)' is not iterable"),
        _("%(type)s cannot be searched with in"),
    ),
    (
        re.compile(r"unsupported operand type\(s\) for (?P<op>\S+): '(?P<left>\w+)' and '(?P<right>\w+)'"),
        _("%(op)s does not apply to %(left)s and %(right)s"),
    ),
    (re.compile(r"'(?P<type>\w+)' object is not subscriptable"), _("%(type)s cannot be indexed")),
    (re.compile(r"object of type '(?P<type>\w+)' has no len\(\)"), _("%(type)s has no length")),
    (
        re.compile(r'can only concatenate str \(not "(?P<type>\w+)"\) to str'),
        _("only a text can be added to a text, not %(type)s"),
    ),
]


def python_detail(detail: str) -> str:
    """Python's text inside an expression's runtime message, in the active language: the TypeErrors
    rules meet on request data by sentence, anything else quoted as Python's own words."""
    for pattern, template in _PYTHON_TYPE_ERRORS:
        match = pattern.fullmatch(detail)
        if match:
            names = {
                key: value if key == "op" else _type_name(value) for key, value in match.groupdict().items()
            }
            return str(template) % names
    return library_text(detail, "Python")


def _type_name(python: str) -> str:
    names = {
        "str": _("a text"),
        "int": _("a number"),
        "float": _("a number"),
        "NoneType": _("None (a missing value)"),
        "list": _("a list"),
        "dict": _("an object"),
        "bool": _("true/false"),
    }
    return str(names.get(python, python))


def engine_text(reason: str) -> str:
    """A reason the engine gave without a message id, in the active language where it is known: an
    invalid regular expression (RE2's message), an expression's error stored as its English text (a
    run's step, a shadow's or an impact's error: read back to its message id), a tool the server
    does not have (the pre-step at run time). Anything else stays as the engine wrote it."""
    from servers.mcp_messages import mcp_message

    regex = engine_regex_text(reason)
    if regex is not None:
        return regex
    stored = stored_expr_error(reason)
    return expr_text(stored) if stored is not None else mcp_message(reason)


_STORED = re.compile(
    r"(?s)(?:(?P<field>when|params): )?"
    r"(?:line (?P<line>\d+)(?:, column (?P<column>\d+))?: )?(?P<reason>.+)"
)


def _template_pattern(template: str) -> re.Pattern[str]:
    parts, seen, pattern = re.split(r"%\((\w+)\)s", template), set(), ""
    for i, part in enumerate(parts):
        if i % 2 == 0:
            pattern += re.escape(part)
        else:  # a parameter; named again later in the template: the same text
            pattern += f"(?P={part})" if part in seen else f"(?P<{part}>.+?)"
            seen.add(part)
    return re.compile(f"(?s){pattern}")


# The engine's English templates (llamon_agent.expr.messages) as patterns, the most literal text
# first; a template with almost no words of its own would match any text and is left out.
_READ_BACK = sorted(
    (
        (msg_id, _template_pattern(template))
        for msg_id, template in ENGINE_MESSAGES.items()
        if len(re.sub(r"%\(\w+\)s", "", template).strip(" :;,.")) >= 4
    ),
    key=lambda item: -len(re.sub(r"\(\?P<\w+>\.\+\?\)", "", item[1].pattern)),
)


def stored_expr_error(text: str) -> ExprError | None:
    """A rule expression's error stored as ``str(ExprError)`` ("when: line 1, column 5: wrong type:
    ..."; with its field, its place or both), read back to its message id and parameters; None when the text is
    not one. Templates with almost no words of their own ("%(kind)s: %(detail)s") are not read back."""
    found = _STORED.fullmatch(str(text or "").strip())
    if found is None or (found["field"] is None and found["line"] is None):
        return None  # neither a field nor a place: not an expression's error
    for msg_id, pattern in _READ_BACK:
        match = pattern.fullmatch(found["reason"])
        if match is not None:
            line, column = found["line"], found["column"]
            return ExprError(
                found["reason"],
                int(line) if line else None,
                int(column) if column else None,
                field=found["field"],
                msg_id=msg_id,
                params=match.groupdict(),
            )
    return None


def expr_text(exc: ExprError) -> str:
    """Like ``str(exc)`` (field, line, column, reason), in the active language."""
    reason = expr_reason(exc)
    if exc.line is not None and exc.column is not None:
        reason = gettext("line %(line)s, column %(column)s: %(reason)s") % {
            "line": exc.line,
            "column": exc.column,
            "reason": reason,
        }
    elif exc.line is not None:
        reason = gettext("line %(line)s: %(reason)s") % {"line": exc.line, "reason": reason}
    return f"{exc.field}: {reason}" if exc.field else reason
