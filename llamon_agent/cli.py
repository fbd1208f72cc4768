"""The ``llamon`` command: ``new`` (scaffold a project), ``check`` (report its problems), ``run`` (serve it over A2A),
``import-tools`` (read an ``app/tools.py`` as a rule set).

    llamon new --template graph-sequential my-flow
    llamon check my-flow            # exit 0 clean, 1 problems, 2 cannot load
    llamon run my-flow --port 8001  # A2A on http://127.0.0.1:8001/
    llamon import-tools app/tools.py --out ruleset.json   # exit 0 all translated, 1 some left out, 2 unreadable

See docs/cli.md.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence

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

    args = parser.parse_args(argv)
    if args.command == "import-tools":
        return _import_tools(args)
    if args.command == "new":
        return _new(args)
    if args.command == "check":
        return _check(args)
    return _run(args)


def _new(args: argparse.Namespace) -> int:
    from llamon_agent.flow.scaffold import ScaffoldError, default_demo_dir, new_project

    try:
        written = new_project(
            args.template, args.directory, name=args.name, demo_dir=args.demo_servers, force=args.force
        )
    except ScaffoldError as exc:
        print(f"llamon new: {exc}", file=sys.stderr)
        return EXIT_PROBLEMS
    print(f"created {args.directory} from template {args.template} ({len(written)} files)")
    if args.demo_servers is None and default_demo_dir() is None:
        print(
            "note: the demo MCP servers were not found; edit registry.yaml (or pass --demo-servers DIR)",
            file=sys.stderr,
        )
    print(f"next: cd {args.directory} && cp .env.example .env && pytest && llamon run .")
    return EXIT_OK


def _check(args: argparse.Namespace) -> int:
    from llamon_agent.project import ProjectLoadError, check_project

    try:
        report = asyncio.run(check_project(args.path))
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
    from pathlib import Path

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
