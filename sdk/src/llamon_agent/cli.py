"""The ``llamon`` command: ``new`` (scaffold a project), ``check`` (report its problems), ``run`` (serve it over A2A),
``import-tools`` (read an ``app/tools.py`` as a rule set), ``rules`` (a workbench rule set as files in git).

    llamon new --template graph-sequential my-flow
    llamon check my-flow            # exit 0 clean, 1 problems, 2 cannot load
    llamon run my-flow --port 8001  # A2A on http://127.0.0.1:8001/
    llamon import-tools app/tools.py --out ruleset.json   # exit 0 all translated, 1 some left out, 2 unreadable
    llamon rules pull support rules/   # rules as code (docs/rules-as-code.md); also push, diff, test

See docs/cli.md.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

logger = logging.getLogger("llamon_agent")

EXIT_OK, EXIT_PROBLEMS, EXIT_CANNOT_LOAD = 0, 1, 2


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``llamon`` command line; returns the exit status."""
    from llamon_agent.flow.scaffold import TEMPLATES

    parser = argparse.ArgumentParser(
        prog="llamon", description="llamon agents: scaffold, check and serve projects."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    new = commands.add_parser("new", help="create a project from a template")
    new.add_argument(
        "--template", "-t", choices=TEMPLATES, default="react", help="project template (default: react)"
    )
    new.add_argument("--name", help="agent name (default: the directory's name)")
    new.add_argument(
        "--demo-servers", metavar="DIR", help="where the demo MCP servers are (for registry.yaml)"
    )
    new.add_argument("--force", action="store_true", help="write into a directory that is not empty")
    new.add_argument("directory")

    check = commands.add_parser("check", help="load a project and report its problems")
    check.add_argument("path", nargs="?", default=".")
    check.add_argument(
        "--offline",
        action="store_true",
        help="do not ask the MCP servers for their tools (tool names go unchecked)",
    )

    run = commands.add_parser("run", help="serve a project over A2A")
    run.add_argument("path", nargs="?", default=".")
    run.add_argument("--host", default="127.0.0.1")
    run.add_argument("--port", type=int, default=8001)
    run.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])

    imp = commands.add_parser(
        "import-tools",
        help="read an app/tools.py as rules (parsed, never run); print them or write a llamon-ruleset/1 file",
    )
    imp.add_argument("file", help="the module, e.g. app/tools.py")
    imp.add_argument("--out", metavar="FILE", help="write the rules as a llamon-ruleset/1 JSON file")
    imp.add_argument("--name", help="the rule set's name in that file (default: the module's name)")
    imp.add_argument("--json", action="store_true", help="print the preview as JSON")

    rules = commands.add_parser(
        "rules",
        help="a workbench rule set as files in git: pull, push, diff, test (docs/rules-as-code.md)",
        description="The API token is read from LLAMON_TOKEN, never from the command line.",
    )
    rules_commands = rules.add_subparsers(dest="rules_command", required=True, metavar="ACTION")
    url_help = "the workbench's URL (default: $LLAMON_URL); the API token comes from $LLAMON_TOKEN"
    pull = rules_commands.add_parser("pull", help="write a rule set into a directory (one file a rule)")
    pull.add_argument("set", help="the rule set's name (or id)")
    pull.add_argument("directory")
    pull.add_argument("--url", help=url_help)
    push = rules_commands.add_parser(
        "push", help="replace the set's draft with the directory; refused when the set changed since the pull"
    )
    push.add_argument("directory")
    push.add_argument("--url", help=url_help)
    push.add_argument(
        "--publish",
        action="store_true",
        help="then publish the draft; on a protected agent this opens a change request instead",
    )
    push.add_argument("--message", default="", help="the version's message (with --publish)")
    push.add_argument(
        "--reason", default="", help="why, for the approvers of a change request (with --publish)"
    )
    rdiff = rules_commands.add_parser(
        "diff", help="what a push would change on the workbench (exit 1 when something would)"
    )
    rdiff.add_argument("directory")
    rdiff.add_argument("--url", help=url_help)
    rtest = rules_commands.add_parser(
        "test",
        help="the workbench's static checks and the directory's test cases, with the engine alone, no "
        "server (exit 1 on a check error or a failing case)",
    )
    rtest.add_argument("directory")
    rtest.add_argument("--junit-xml", metavar="PATH", help="also write the results as JUnit XML")

    args = parser.parse_args(argv)
    if args.command == "rules":
        return _rules(args)
    if args.command == "import-tools":
        return _import_tools(args)
    if args.command == "new":
        return _new(args)
    if args.command == "check":
        return _check(args)
    return _run(args)


def _new(args: argparse.Namespace) -> int:
    from llamon_agent.flow.scaffold import ScaffoldError, new_project

    try:
        written = new_project(
            args.template, args.directory, name=args.name, demo_dir=args.demo_servers, force=args.force
        )
    except ScaffoldError as exc:
        print(f"llamon new: {exc}", file=sys.stderr)
        return EXIT_PROBLEMS
    print(f"created {args.directory} from template {args.template} ({len(written)} files)")
    print(f"next: cd {args.directory} && cp .env.example .env && pytest && llamon run .")
    return EXIT_OK


def _check(args: argparse.Namespace) -> int:
    from llamon_agent.project import ProjectLoadError, check_project

    try:
        report = asyncio.run(check_project(args.path, ask_servers=not args.offline))
    except ProjectLoadError as exc:
        print(f"llamon check: {exc}", file=sys.stderr)
        return EXIT_CANNOT_LOAD
    for problem in report.problems:
        print(problem)
    for note in report.notes:
        print(f"note: {note}", file=sys.stderr)
    if not report.problems:
        kind = report.project.kind if report.project is not None else "project"
        print(f"ok: {args.path} ({kind}) has no problems")
    return report.exit_code


def _import_tools(args: argparse.Namespace) -> int:
    import json

    from llamon_agent.tools_import import MAX_SOURCE_BYTES, ToolsImportError, translate_tools_module

    path = Path(args.file)
    try:
        with path.open("rb") as handle:
            source = handle.read(MAX_SOURCE_BYTES + 1)  # the translator refuses more; never read a huge file
        result = translate_tools_module(source, filename=args.file)
    except OSError as exc:
        print(f"llamon import-tools: {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_CANNOT_LOAD
    except ToolsImportError as exc:
        print(f"llamon import-tools: {args.file}: {exc}", file=sys.stderr)
        return EXIT_CANNOT_LOAD
    if args.json:
        print(json.dumps(result.to_json(), ensure_ascii=False, indent=2))
    else:
        for i, rule in enumerate(result.rules, 1):
            flags = "".join([" stop" if rule.stop else "", "" if rule.enabled else " disabled"])
            print(f"{i}. {rule.name} ({args.file}:{rule.line}) -> {rule.mcp_id}/{rule.tool_name}{flags}")
            print(f"     when:   {rule.when}")
            print(f"     params: {rule.params}")
        for note in result.notes:
            print(f"note: {note}", file=sys.stderr)
    for item in result.untranslatable:
        print(f"left out: {item}", file=sys.stderr)
    if args.out:
        name = args.name or path.stem
        document = result.ruleset(name, f"Imported from {args.file}.")
        Path(args.out).write_text(json.dumps(document, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
        print(
            f"wrote {len(result.rules)} rules to {args.out} (import it on the workbench's import page or POST /api/rule-sets/import)",
            file=sys.stderr,
        )
    return EXIT_PROBLEMS if result.untranslatable else EXIT_OK


def _rules(args: argparse.Namespace) -> int:
    from llamon_agent import rules_code

    directory = Path(args.directory)
    try:
        if args.rules_command == "test":
            return _rules_test(directory, args.junit_xml)
        workbench = rules_code.workbench_from_env(args.url)
        try:
            if args.rules_command == "pull":
                found = workbench.find_set(args.set)
                content = workbench.content(int(found["id"]))
                count = rules_code.write_tree(directory, content)
                print(
                    f"pulled rule set {content['name']!r} (content {content['content_sha256'][:12]}) into {directory} "
                    f"({len(content['document']['rules'])} rules, {len(content['document']['cases'])} cases, {count} files)"
                )
                return EXIT_OK
            tree = rules_code.read_tree(directory)
            found = workbench.find_set(tree.name)
            content = workbench.content(int(found["id"]))
            changes = rules_code.document_diff(content["document"], tree.document)
            if args.rules_command == "diff":
                for line in changes:
                    print(line)
                if tree.base is not None and content.get("content_sha256") != tree.base:
                    print(
                        "note: the set changed on the workbench since the directory's content was pulled: "
                        "a push goes through only if it keeps those changes",
                        file=sys.stderr,
                    )
                elif tree.base is None and content["revision"] != tree.revision:
                    print(
                        f"note: the set is at revision {content['revision']} on the workbench, the directory "
                        f"was pulled at {tree.revision}: a push would be refused",
                        file=sys.stderr,
                    )
                return EXIT_PROBLEMS if changes else EXIT_OK
            if tree.base is None and content["revision"] != tree.revision:
                raise rules_code.RulesCodeError(
                    f"the rule set {tree.name!r} changed on the workbench since the pull (revision "
                    f"{content['revision']}, the directory has {tree.revision}); pull into a clean checkout, "
                    "merge your edits and push again"
                )
            if not changes:
                print(f"nothing to push: {directory} is what the workbench has")
            else:
                # Based on content: the workbench refuses only a push that would undo its own changes.
                base: dict[str, Any] = {"revision": tree.revision}
                if tree.base is not None:
                    # The contents this directory went through in git (an earlier merge's push is one).
                    base = {"base": tree.base, "ancestors": rules_code.git_ancestors(directory)}
                saved = workbench.request(
                    "PUT", f"/api/rule-sets/{found['id']}/content", {"data": tree.document, **base}
                )
                # The directory is now what the workbench has: a next push from here starts from it.
                meta = {k: v for k, v in tree.meta.items() if k != "revision"}
                meta_path = directory / "ruleset.json"
                meta_path.write_text(
                    rules_code.dump({**meta, "content_sha256": saved["content_sha256"]}), encoding="utf-8"
                )
                for line in changes:
                    print(line)
                print(
                    f"pushed {directory} to rule set {tree.name!r}: revision {saved['revision']}"
                    + ("" if args.publish else " (the draft; publish it to serve it, or push with --publish)")
                )
                content = workbench.content(int(found["id"]))
            if args.publish:
                if content.get("published_as") is not None:
                    print(f"nothing to publish: the draft is v{content['published_as']}")
                else:
                    print(
                        workbench.publish(
                            int(found["id"]),
                            revision=int(content["revision"]),
                            message=args.message,
                            reason=args.reason,
                        )
                    )
            return EXIT_OK
        finally:
            workbench.close()
    except rules_code.RulesCodeError as exc:
        print(f"llamon rules {args.rules_command}: {exc}", file=sys.stderr)
        return EXIT_CANNOT_LOAD
    except OSError as exc:  # the directory cannot be written (a file in the way, no permission, a full disk)
        print(
            f"llamon rules {args.rules_command}: {exc.filename or directory}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return EXIT_CANNOT_LOAD


def _rules_test(directory: Path, junit_path: str | None) -> int:
    from llamon_agent import rules_code

    tree = rules_code.read_tree(directory)
    run = rules_code.run_tests(tree)
    for name, found in run.problems.items():
        for check in found:
            print(f"{'ERROR' if check.level == 'error' else 'warn '} {name}: {check.message}")
    for case in run.cases:
        print(f"{'ok  ' if case.result.passed else 'FAIL'} {case.name}")
        for problem in case.result.problems:
            print(f"       {problem}")
    checks = sum(len(ps) for ps in run.errors.values())
    print(
        f"{len(run.cases) - len(run.failed)} passed, {len(run.failed)} failed, "
        f"{checks} check error{'s' if checks != 1 else ''} "
        f"({tree.name}, {len(tree.document['rules'])} rules, {run.seconds:.2f} s)"
    )
    if junit_path:
        try:
            Path(junit_path).write_bytes(rules_code.junit_xml(run))
        except OSError as exc:
            raise rules_code.RulesCodeError(f"{junit_path}: {exc.strerror or exc}") from None
    return EXIT_PROBLEMS if run.failed or run.errors else EXIT_OK


def _run(args: argparse.Namespace) -> int:
    from llamon_agent.project import ProjectLoadError, load_project
    from llamon_agent.serve import ServeError, serve
    from llamon_agent.settings import SettingsError

    _configure_logging(args.log_level)
    try:
        project = load_project(args.path)
        for problem in project.unlisted:  # the seed's "function never called" row, as a warning
            logger.warning("%s", problem)
        settings = project.settings()
    except (ProjectLoadError, SettingsError) as exc:
        print(f"llamon run: {exc}", file=sys.stderr)
        return EXIT_CANNOT_LOAD
    try:
        asyncio.run(serve(project, host=args.host, port=args.port, settings=settings))
    except ServeError as exc:
        print(f"llamon run: {exc}", file=sys.stderr)
        return EXIT_CANNOT_LOAD
    except KeyboardInterrupt:
        pass
    return EXIT_OK


def _configure_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # One line per HTTP request and MCP message would drown the per-request pre-step line.
    for noisy in ("httpx", "httpcore", "mcp", "a2a", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, getattr(logging, level)))


if __name__ == "__main__":
    sys.exit(main())
