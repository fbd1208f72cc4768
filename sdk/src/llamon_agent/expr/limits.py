"""Caps on expressions and request data, and the names an expression may use."""

from __future__ import annotations

import re

# Expression caps: checked when a rule is saved (compile time).
MAX_SOURCE_CHARS = 4_000  # seed conditions are < 100 chars; a 100-keyword list fits
MAX_NESTING = 20  # ( [ { nesting, checked on tokens before parsing
MAX_DEPTH = 50  # syntax-tree depth after parsing (a + b + ... chains nest one level per term)
MAX_NODES = 1_000  # syntax-tree nodes after parsing
MAX_STR_LITERAL_CHARS = 1_000
MAX_INT = 2**63 - 1  # int literals and the results of + * % sum() stay within 64 bits
MAX_PATTERN_CHARS = 1_000  # a regular expression, literal or built at run time
MAX_RULE_NAME_CHARS = 100

# Run-time caps: what a single operation may build.
MAX_RESULT_CHARS = 100_000  # a string built by +, join() or replace()
MAX_RESULT_ITEMS = 10_000  # a list/tuple built by +, or the items given to join()
MAX_ITER_ITEMS = 10_000  # items one comprehension may loop over

# Request caps: the product rejects bigger requests before any rule runs (request_size_error);
# build_namespace enforces them again, loosely, as a second line.
MAX_QUERY_CHARS = 32_000
MAX_DATA_BYTES = 256 * 1024  # UTF-8 JSON of context + a2a_data + a2a_files
MAX_DATA_DEPTH = 32  # nesting of request data
MAX_PARTS = 100  # DataParts (a2a_data) and FileParts (a2a_files), each
# FileParts describe files (name, mimeType, uri, size: a2a.py), never hold them: JSON of a2a_files,
# counted apart from MAX_DATA_BYTES so that a rule reading every file is priced on this, not 256 KiB
MAX_FILES_BYTES = 16 * 1024

# --- names ------------------------------------------------------------------------------
CTX_NAMES = ("ctx", "query", "context", "a2a_data", "a2a_files", "tool_names")
CTX_ATTRS = frozenset({"query", "context", "a2a_data", "a2a_files", "mcp_tools", "tool_names"})
HELPER_NAMES = ("contains_any", "contains_all", "re_search", "re_find", "data_get", "to_number")
REGEX_CALLS = ("re_search", "re_find")  # the helpers whose first argument is a regex pattern
BUILTIN_NAMES = (
    "len",
    "str",
    "int",
    "float",
    "bool",
    "min",
    "max",
    "any",
    "all",
    "sorted",
    "abs",
    "round",
    "sum",
)
SORT_KEYS = ("len", "str", "int", "float", "abs", "bool")  # the key= a sort or min/max may use
# Methods that cannot mutate and whose result is no bigger than (a small multiple of) their input.
_STR_METHODS = (
    "lower upper casefold strip lstrip rstrip startswith endswith split rsplit splitlines partition "
    "rpartition find rfind index count isdigit isdecimal isnumeric isalpha isalnum isspace "
    "removeprefix removesuffix"
)
_SIZE_CHECKED_METHODS = "join replace"  # through hidden helpers, see _GUARDED_METHODS
_DICT_METHODS = "get keys values items"
_SET_METHODS = "union intersection difference issubset issuperset isdisjoint"  # tool_names is a set
METHOD_NAMES = frozenset(" ".join((_STR_METHODS, _SIZE_CHECKED_METHODS, _DICT_METHODS, _SET_METHODS)).split())
_GUARDED_METHODS = {"join": "__llamon_join", "replace": "__llamon_replace"}
_RESERVED = frozenset(CTX_NAMES) | frozenset(HELPER_NAMES) | frozenset(BUILTIN_NAMES)
_CALLABLE = frozenset(HELPER_NAMES) | frozenset(BUILTIN_NAMES)
_NAMES_HINT = "use ctx, query, context, a2a_data, a2a_files, tool_names or a helper"
_FILENAME = "<expr>"
# Trojan-source characters: they make a rule read differently from what it does.
_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069]")
_NEWLINES = re.compile(r"\r\n|\r|\n")
