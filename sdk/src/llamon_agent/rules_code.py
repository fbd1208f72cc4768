"""Rules as code: a workbench rule set as a directory of files in git (``llamon rules pull/push/diff/test``).

The directory (docs/rules-as-code.md)::

    ruleset.json          name, description, the set's id and the content hash (sha256) the pull came from,
                          the servers the rules name (enabled, tool lists: what a dry run binds)
    rules/010-<name>.json one file a rule, in evaluation order (the file names sort in that order)
    cases/<name>.json     one file a test case

Every file is JSON with sorted keys, a 2-space indent and a final newline, so two pulls of the same
set give byte-identical trees and a review shows one rule's change in one file. ``pull``, ``push``
and ``diff`` talk to the workbench's REST API (``GET``/``PUT /api/rule-sets/{id}/content``) with
an API token from ``LLAMON_TOKEN``; ``test`` needs no server: it compiles the rules with the engine
and checks each case with llamon_agent.cases, the comparison the workbench's case runner uses.
"""

from __future__ import annotations

import difflib
import hashlib
import io
import json
import os
import re
import subprocess
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from llamon_agent.cases import INPUT_KEYS, CaseResult, case_compare, case_dry_run, expected_defaults
from llamon_agent.expr import ExprError, expression_rule
from llamon_agent.prestep import compile_rules
from llamon_agent.rule_checks import Problem, rule_set_problems
from llamon_agent.tools import ToolInfo

DIR_FORMAT = "llamon-rules-dir/1"
RULESET_FORMAT = "llamon-ruleset/1"
RULE_FIELDS = ("name", "description", "mcp_id", "tool_name", "when", "params", "stop", "enabled")
MAX_RESPONSE_BYTES = 32 * 1024 * 1024  # an import is at most 2 MiB; the servers' tool lists come on top
MAX_FILE_BYTES = 2 * 1024 * 1024
MAX_FILES = 4_000  # 2,000 rules and 2,000 cases, the import's limits
TIMEOUT_SECONDS = 30.0
_SLUG = re.compile(r"[^\w.-]+")


class RulesCodeError(Exception):
    """A one-line reason the command cannot go on (exit 2)."""


def dump(value: Any) -> str:
    """The one formatting of every file: sorted keys, 2-space indent, UTF-8 text, final newline."""
    return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True) + "\n"


# --- the workbench ------------------------------------------------------------------------------


class Workbench:
    """The workbench's REST API with an API token; every failure becomes a RulesCodeError."""

    def __init__(self, url: str | None, token: str | None, *, transport: httpx.BaseTransport | None = None):
        if not url:
            raise RulesCodeError("no workbench URL: pass --url or set LLAMON_URL")
        if not url.startswith(("http://", "https://")):
            raise RulesCodeError(f"--url must be an http:// or https:// URL, not {url!r}")
        if not token:
            raise RulesCodeError(
                "no API token: set LLAMON_TOKEN to a token made on the workbench's Tokens page (/tokens/)"
            )
        self.url = url.rstrip("/")
        self._client = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            timeout=TIMEOUT_SECONDS,
            follow_redirects=False,
            transport=transport,
        )

    def close(self) -> None:
        self._client.close()

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """The JSON answer of a 2xx; RulesCodeError naming the cause otherwise."""
        try:
            with self._client.stream(method, path, json=body) as response:
                raw = bytearray()
                for chunk in response.iter_bytes():
                    raw += chunk
                    if len(raw) > MAX_RESPONSE_BYTES:
                        raise RulesCodeError(
                            f"the answer of {self.url}{path} is larger than {MAX_RESPONSE_BYTES // 1024 // 1024} MiB"
                        )
        except httpx.TimeoutException:
            raise RulesCodeError(
                f"the workbench at {self.url} did not answer within {TIMEOUT_SECONDS:.0f} s"
            ) from None
        except httpx.HTTPError as exc:
            raise RulesCodeError(f"cannot reach the workbench at {self.url}: {exc}") from None
        try:
            data = json.loads(bytes(raw)) if raw else None
        except ValueError:
            data = None
        status = response.status_code
        if 200 <= status < 300:
            if data is None:
                raise RulesCodeError(
                    f"the answer of {self.url}{path} is not JSON: is {self.url} the workbench?"
                )
            return data
        full = data.get("detail") if isinstance(data, dict) else None
        detail = str(full)[:500] if full else f"HTTP {status}"
        if status == 401:
            raise RulesCodeError(f"the workbench refused the token (401: {detail}); check LLAMON_TOKEN")
        if status == 403:
            raise RulesCodeError(f"the token's user may not do this (403: {detail})")
        if status == 404:
            raise NotFound(detail)
        if status == 409 and full and "\n" in str(full):
            # A push refused on its content base: the changes to resolve, one a line (up to 200 lines).
            raise RulesCodeError("\n".join(str(full).splitlines()[:201]))
        if status == 409:
            raise RulesCodeError(
                f"the rule set changed on the workbench since the pull ({detail}); "
                "pull into a clean checkout, merge your edits and push again"
            )
        if status in (400, 422):
            raise RulesCodeError(f"the workbench refused it: {detail}")
        raise RulesCodeError(f"{method} {self.url}{path} answered HTTP {status}: {detail}")

    def find_set(self, ref: str) -> dict[str, Any]:
        """The rule set named ``ref`` (or whose id it is)."""
        sets = self.request("GET", "/api/rule-sets")
        if not isinstance(sets, list):
            raise RulesCodeError(
                f"{self.url}/api/rule-sets did not answer a list: is {self.url} the workbench?"
            )
        for item in sets:
            if isinstance(item, dict) and item.get("name") == ref:
                return item
        for item in sets:
            if isinstance(item, dict) and ref.isdigit() and item.get("id") == int(ref):
                return item
        names = [str(item.get("name")) for item in sets if isinstance(item, dict)]
        close = difflib.get_close_matches(ref, names, n=3)
        hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
        raise RulesCodeError(f"the workbench at {self.url} has no rule set {ref!r}{hint}")

    def content(self, rule_set_id: int) -> dict[str, Any]:
        try:
            data = self.request("GET", f"/api/rule-sets/{rule_set_id}/content")
        except NotFound:
            raise RulesCodeError(f"the workbench at {self.url} has no rule set {rule_set_id}") from None
        if not isinstance(data, dict) or not isinstance(data.get("document"), dict):
            raise RulesCodeError(f"the content of rule set {rule_set_id} is not what llamon expects")
        return data

    def publish(self, rule_set_id: int, *, revision: int, message: str, reason: str) -> str:
        """Publish the draft at ``revision``; the line to print: the new version, or the change request
        a protected agent turned the publish into (the workbench answers 202 and changes nothing yet)."""
        answer = self.request(
            "POST",
            f"/api/rule-sets/{rule_set_id}/publish",
            {"revision": revision, "message": message, "reason": reason},
        )
        if isinstance(answer, dict) and "change_request" in answer:
            url = str(answer.get("url") or "")
            link = f"{self.url}{url}" if url.startswith("/") else url
            return f"{answer.get('detail') or 'change request opened'} {link}".strip()
        if isinstance(answer, dict) and "number" in answer:
            return f"published v{answer['number']}"
        raise RulesCodeError(f"the publish answer of {self.url} is not what llamon expects")


class NotFound(RulesCodeError):
    """A 404: the caller says what was not found."""


def workbench_from_env(url: str | None) -> Workbench:
    """The workbench of ``--url`` (else LLAMON_URL) with the token of LLAMON_TOKEN (never an argument)."""
    return Workbench(url or os.environ.get("LLAMON_URL"), os.environ.get("LLAMON_TOKEN"))


# --- the directory ------------------------------------------------------------------------------


@dataclass
class RuleTree:
    """A pulled directory read back: its ruleset.json and the llamon-ruleset/1 document it stands for."""

    meta: dict[str, Any]
    document: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.meta["name"])

    @property
    def revision(self) -> int | None:
        """The revision a directory pulled before content hashes was pulled at (None for a newer one)."""
        value = self.meta.get("revision")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def base(self) -> str | None:
        """The content hash the directory was pulled at: what a push is checked against."""
        value = self.meta.get("content_sha256")
        return value if isinstance(value, str) else None


def tree_files(content: Mapping[str, Any]) -> dict[str, str]:
    """The files (relative path -> text) a pull writes for ``content`` (GET .../content)."""
    document = content["document"]
    meta = {
        "format": DIR_FORMAT,
        "name": content["name"],
        "description": document.get("description", ""),
        "rule_set": content["rule_set"],
        "servers": content.get("servers") or {},
    }
    if content.get("content_sha256"):
        # The content pulled, not a counter: a push from any later commit is checked against it.
        meta["content_sha256"] = content["content_sha256"]
    else:  # a workbench from before content hashes
        meta["revision"] = content["revision"]
    files = {"ruleset.json": dump(meta)}
    rules = document.get("rules") or []
    width = max(3, len(str(10 * len(rules))))
    for i, rule in enumerate(rules, 1):
        files[f"rules/{10 * i:0{width}d}-{_slug(rule['name'])}.json"] = dump(
            {key: rule[key] for key in RULE_FIELDS if key in rule}
        )
    used: set[str] = set()
    for case in sorted(document.get("cases") or [], key=lambda c: str(c["name"])):
        base = _slug(str(case["name"])) or "case"
        stem, n = base, 2
        while stem.lower() in used:  # case-insensitive file systems
            stem, n = f"{base}-{n}", n + 1
        used.add(stem.lower())
        files[f"cases/{stem}.json"] = dump(case)
    return files


def _slug(name: str) -> str:
    return _SLUG.sub("_", name).strip("._-")[:80]


def write_tree(directory: Path, content: Mapping[str, Any]) -> int:
    """Write a pull into ``directory``: its files replace the JSON files of rules/ and cases/; returns how many."""
    files = tree_files(content)
    directory.mkdir(parents=True, exist_ok=True)
    for sub in ("rules", "cases"):
        (directory / sub).mkdir(exist_ok=True)
        for old in (directory / sub).glob("*.json"):
            if f"{sub}/{old.name}" not in files:
                old.unlink()
    for rel, text in files.items():
        path = directory / rel
        if not path.exists() or path.read_bytes() != text.encode("utf-8"):
            path.write_bytes(text.encode("utf-8"))
    return len(files)


def read_tree(directory: Path) -> RuleTree:
    """The directory as a document; RulesCodeError naming the file (and line) of the first problem."""
    meta_path = directory / "ruleset.json"
    if not meta_path.is_file():
        raise RulesCodeError(
            f"{meta_path} is missing: is {directory} a directory made by `llamon rules pull`?"
        )
    meta = _read_json(meta_path)
    if not isinstance(meta, dict) or meta.get("format") != DIR_FORMAT:
        raise RulesCodeError(f'{meta_path}: expected an object with "format": "{DIR_FORMAT}"')
    for key, kind in (("name", str), ("rule_set", int)):
        if not isinstance(meta.get(key), kind) or isinstance(meta.get(key), bool):
            raise RulesCodeError(f"{meta_path}: {key!r} is missing or not a {kind.__name__}")
    base = meta.get("content_sha256")
    if base is not None and not (isinstance(base, str) and re.fullmatch(r"[0-9a-f]{64}", base)):
        raise RulesCodeError(f"{meta_path}: 'content_sha256' must be the 64 hex digits a pull wrote")
    revision = meta.get("revision")
    if base is None and (not isinstance(revision, int) or isinstance(revision, bool)):
        raise RulesCodeError(f"{meta_path}: 'content_sha256' is missing: pull the set again")
    if not isinstance(meta.get("servers", {}), dict):
        raise RulesCodeError(f"{meta_path}: 'servers' must be an object")
    rule_files = sorted((directory / "rules").glob("*.json")) if (directory / "rules").is_dir() else []
    case_files = sorted((directory / "cases").glob("*.json")) if (directory / "cases").is_dir() else []
    if len(rule_files) + len(case_files) > MAX_FILES:
        raise RulesCodeError(f"{directory} has more than {MAX_FILES:,} rule and case files")
    rules = []
    for path in rule_files:
        rule = _read_json(path)
        if not isinstance(rule, dict):
            raise RulesCodeError(f"{path}: a rule file holds one JSON object")
        rules.append(rule)
    cases = []
    for path in case_files:
        case = _read_json(path)
        if not isinstance(case, dict) or not isinstance(case.get("name"), str):
            raise RulesCodeError(f"{path}: a case file holds one JSON object with a name")
        cases.append(case)
    document = {
        "format": RULESET_FORMAT,
        "name": meta["name"],
        "description": meta.get("description", ""),
        "rules": rules,
        "cases": sorted(cases, key=lambda c: str(c["name"])),
    }
    return RuleTree(meta=meta, document=document)


def _read_json(path: Path) -> Any:
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise RulesCodeError(f"{path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise RulesCodeError(f"{path} is larger than {MAX_FILE_BYTES // 1024 // 1024} MiB")
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise RulesCodeError(f"{path} is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise RulesCodeError(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}") from None


# --- diff ---------------------------------------------------------------------------------------


def document_diff(server: Mapping[str, Any], local: Mapping[str, Any]) -> list[str]:
    """What pushing ``local`` would change on ``server``, one readable line (or block) an item."""
    out: list[str] = []
    if (server.get("description") or "") != (local.get("description") or ""):
        out += _field_change("rule set", "description", server.get("description"), local.get("description"))
    theirs = {r.get("name"): r for r in server.get("rules") or []}
    ours = {r.get("name"): r for r in local.get("rules") or []}
    for name, rule in ours.items():
        if name not in theirs:
            out.append(
                f"+ rule {name}: {rule.get('mcp_id')}/{rule.get('tool_name')} when {rule.get('when')!s}"
            )
    for name in theirs:
        if name not in ours:
            out.append(f"- rule {name}")
    for name, rule in ours.items():
        if name in theirs:
            for key in RULE_FIELDS:
                old, new = _rule_value(theirs[name], key), _rule_value(rule, key)
                if old != new:
                    out += _field_change(f"rule {name}", key, old, new)
    common_theirs = [n for n in theirs if n in ours]
    common_ours = [n for n in ours if n in theirs]
    if common_theirs != common_ours:
        out.append(f"~ order: {', '.join(map(str, common_theirs))} -> {', '.join(map(str, common_ours))}")
    theirs_cases = {c.get("name"): c for c in server.get("cases") or []}
    ours_cases = {c.get("name"): c for c in local.get("cases") or []}
    for name in ours_cases:
        if name not in theirs_cases:
            out.append(f"+ case {name}")
    for name in theirs_cases:
        if name not in ours_cases:
            out.append(f"- case {name}")
    for name, case in ours_cases.items():
        if name in theirs_cases:
            for key in ("input", "expected", "pinned"):
                old, new = _case_value(theirs_cases[name], key), _case_value(case, key)
                if old != new:
                    out += _field_change(f"case {name}", key, old, new)
    return out


_RULE_DEFAULTS: dict[str, Any] = {"description": "", "params": "{}", "stop": False, "enabled": True}


# --- content hashes: what a push is based on ------------------------------------------------------


def content_normal(document: Mapping[str, Any]) -> dict[str, Any]:
    """A document's content as compared and hashed: the description, the rules' order, each rule's
    fields and each case's input and expectation, with the defaults the workbench fills in (so that
    leaving a default out of a file changes nothing). Pinned outputs are replay data, not content.
    The workbench hashes and compares with this same function (rules.content)."""
    rules = [r for r in document.get("rules") or [] if isinstance(r, Mapping)]
    cases = [c for c in document.get("cases") or [] if isinstance(c, Mapping)]
    return {
        "description": document.get("description", ""),
        "order": [str(r.get("name")) for r in rules],
        "rules": {
            str(r.get("name")): {k: _rule_value(r, k) for k in RULE_FIELDS if k != "name"} for r in rules
        },
        "cases": {
            str(c.get("name", "")).strip(): {k: _case_value(c, k) for k in ("input", "expected")}
            for c in cases
        },
    }


def content_hash(document: Mapping[str, Any]) -> str:
    """SHA-256 of a document's content (content_normal): the base a pull records and a push sends."""
    text = json.dumps(content_normal(document), ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def git_ancestors(directory: Path, limit: int = 20) -> list[str]:
    """The content hashes of ``directory`` at the last ``limit`` commits that changed it, newest first
    ([] outside a git repository, or when git is missing). A push sends them so that the workbench
    can tell a content this history went through (an earlier merge's push) from a change made on the
    workbench: CI checkouts need the history (actions/checkout with fetch-depth: 0)."""

    def git(*args: str) -> bytes:
        return subprocess.run(
            ["git", "-C", str(directory), *args], check=True, capture_output=True, timeout=60
        ).stdout

    try:
        commits = git("log", f"-n{limit}", "--format=%H", "--", ".").decode().split()
    except (OSError, subprocess.SubprocessError):
        return []
    hashes: list[str] = []
    for commit in commits:
        try:
            archive = git("archive", "--format=tar", commit, "--", ".")
            with tempfile.TemporaryDirectory() as tmp, tarfile.open(fileobj=io.BytesIO(archive)) as tar:
                tar.extractall(tmp, filter="data")
                # Run from the directory, git archive writes its files relative to it.
                hashes.append(content_hash(read_tree(Path(tmp)).document))
        except (OSError, subprocess.SubprocessError, tarfile.TarError, RulesCodeError):
            continue  # a commit where the directory was not readable: no base from it
    return hashes


def _rule_value(rule: Mapping[str, Any], key: str) -> Any:
    return rule.get(key, _RULE_DEFAULTS.get(key))


def _case_value(case: Mapping[str, Any], key: str) -> Any:
    """A case's field with the defaults the workbench fills in, so that leaving them out is no change."""
    value = case.get(key)
    if key == "pinned":
        return value or []
    if key == "expected" and isinstance(value, dict):
        return expected_defaults(value)
    if key == "input" and isinstance(value, dict):
        return {"context": {}, "a2a_data": None, "a2a_files": None, **value} | {
            "context": value.get("context") or {}
        }
    return value


def _field_change(what: str, key: str, old: Any, new: Any) -> list[str]:
    def text(value: Any) -> str:
        return (
            value
            if isinstance(value, str)
            else json.dumps(value, ensure_ascii=False, sort_keys=True, indent=2)
        )

    a, b = text(old), text(new)
    if "\n" not in a and "\n" not in b and len(a) + len(b) < 160:
        return [
            f"~ {what}: {key}: {a!r} -> {b!r}" if isinstance(old, str) else f"~ {what}: {key}: {a} -> {b}"
        ]
    lines = [f"~ {what}: {key}:"]
    lines += [
        f"    {line}"
        for line in difflib.unified_diff(
            a.splitlines(), b.splitlines(), "workbench", "directory", lineterm="", n=1
        )
    ]
    return lines


# --- test ---------------------------------------------------------------------------------------


@dataclass
class CaseRun:
    name: str
    result: CaseResult
    seconds: float


@dataclass
class TestRun:
    """A directory checked with the engine alone: the static checks' problems per rule (the
    workbench's checks, llamon_agent.rule_checks) and every case."""

    rule_set: str
    problems: dict[str, list[Problem]] = field(default_factory=dict)
    cases: list[CaseRun] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failed(self) -> list[CaseRun]:
        return [c for c in self.cases if not c.result.passed]

    @property
    def errors(self) -> dict[str, list[Problem]]:
        """The rules with a static-check error (the workbench calls them errors too)."""
        found = {name: [p for p in ps if p.level == "error"] for name, ps in self.problems.items()}
        return {name: ps for name, ps in found.items() if ps}


def run_tests(tree: RuleTree) -> TestRun:
    """The static checks of the directory's rules against ruleset.json's servers, then each case
    dry run on the rules (enabled ones, in file order) over those servers' tools."""
    started = time.perf_counter()
    run = TestRun(rule_set=tree.name)
    servers = {
        str(mcp_id): server
        for mcp_id, server in (tree.meta.get("servers") or {}).items()
        if isinstance(server, dict)
    }
    try:
        run.problems = rule_set_problems(tree.document["rules"], servers)
    except (KeyError, TypeError, AttributeError) as exc:
        raise RulesCodeError(f"a rule file lacks a field or has one of the wrong type: {exc!r}") from None
    tools = _bound_tools(servers)
    compile_error = None
    compiled = None
    try:
        compiled = compile_rules(
            [
                expression_rule(
                    name=rule["name"],
                    mcp_id=rule["mcp_id"],
                    tool_name=rule["tool_name"],
                    when=rule["when"],
                    params=rule.get("params", "{}"),
                    stop=bool(rule.get("stop", False)),
                )
                for rule in tree.document["rules"]
                if rule.get("enabled", True)
            ]
        )
    except (ExprError, KeyError, TypeError, ValueError) as exc:
        # As on the workbench: a set that does not compile fails every case.
        compile_error = f"the rule set does not compile: {exc}"
    for case in tree.document["cases"]:
        t0 = time.perf_counter()
        result = _run_case(compiled, compile_error, case, tools)
        run.cases.append(CaseRun(name=case["name"], result=result, seconds=time.perf_counter() - t0))
    run.seconds = time.perf_counter() - started
    return run


def _bound_tools(servers: Mapping[str, Any]) -> dict[str, list[ToolInfo]]:
    """The tools of the enabled servers, as the workbench's dry run binds them."""
    bound: dict[str, list[ToolInfo]] = {}
    for mcp_id, server in servers.items():
        if isinstance(server, dict) and server.get("enabled", True):
            bound[mcp_id] = [
                ToolInfo(
                    str(t.get("name")), str(t.get("description") or ""), dict(t.get("input_schema") or {})
                )
                for t in server.get("tools") or []
                if isinstance(t, dict)
            ]
    return bound


def _run_case(
    compiled: Any, compile_error: str | None, case: Mapping[str, Any], tools: Mapping[str, Sequence[ToolInfo]]
) -> CaseResult:
    case_input, expected = case.get("input"), case.get("expected")
    if (
        not isinstance(case_input, dict)
        or not isinstance(case_input.get("query"), str)
        or set(case_input) - set(INPUT_KEYS)
        or not isinstance(expected, dict)
    ):
        problem = "the case itself is invalid: it needs an input with a query and an expected outcome"
        return CaseResult(passed=False, problems=[problem], diff=[])
    if compile_error is not None:
        return CaseResult(passed=False, problems=[compile_error], diff=[])
    try:
        return case_compare(expected_defaults(expected), case_dry_run(compiled, case_input, tools))
    except (KeyError, TypeError, AttributeError) as exc:
        return CaseResult(passed=False, problems=[f"the case itself is invalid: {exc!r}"], diff=[])


def junit_xml(run: TestRun) -> bytes:
    """The run as JUnit XML: one testsuite, one testcase a case, a <failure> with its problems."""
    suites = ET.Element("testsuites", name="llamon rules test")
    suite = ET.SubElement(
        suites,
        "testsuite",
        name=run.rule_set,
        tests=str(len(run.cases) + len(run.errors)),
        failures=str(len(run.failed) + len(run.errors)),
        errors="0",
        skipped="0",
        time=f"{run.seconds:.3f}",
    )
    for name, problems in run.errors.items():
        element = ET.SubElement(
            suite, "testcase", classname=f"rules.{run.rule_set}", name=f"check {name}", time="0"
        )
        failure = ET.SubElement(element, "failure", message=problems[0].message[:1000], type="CheckError")
        failure.text = "\n".join(p.message for p in problems)
    for case in run.cases:
        element = ET.SubElement(
            suite, "testcase", classname=f"rules.{run.rule_set}", name=case.name, time=f"{case.seconds:.3f}"
        )
        if not case.result.passed:
            failure = ET.SubElement(
                element, "failure", message=case.result.problems[0][:1000], type="CaseFailed"
            )
            failure.text = "\n".join(case.result.problems)
    suites.set("tests", suite.get("tests", "0"))
    suites.set("failures", suite.get("failures", "0"))
    ET.indent(suites)
    text: bytes = ET.tostring(suites, encoding="utf-8", xml_declaration=True)
    return text + b"\n"
