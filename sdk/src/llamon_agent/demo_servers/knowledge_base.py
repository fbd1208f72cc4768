#!/usr/bin/env python3
"""knowledge-base: a demo MCP server that searches help articles (Korean and English) in demo_data.json.

    python -m llamon_agent.demo_servers.knowledge_base                      # stdio
    python -m llamon_agent.demo_servers.knowledge_base --http --port 8767   # http://127.0.0.1:8767/mcp

Tools: search_docs(q, limit=3).
Self-contained on purpose (no shared helper module): each demo server can be copied alone.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from functools import cache
from pathlib import Path
from typing import Any

try:  # mcp 2 renamed FastMCP to MCPServer; host and port moved from the constructor to run()
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    MCP_2 = True
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as MCPServer  # type: ignore[no-redef]
    from mcp.server.fastmcp.exceptions import ToolError  # type: ignore[no-redef]

    MCP_2 = False
from pydantic import BaseModel

SERVER_NAME = "knowledge-base"
DEFAULT_PORT = 8767
DATA_FILE = Path(__file__).with_name("demo_data.json")
MAX_LIMIT = 10
SNIPPET_CHARS = 120
WORD_RE = re.compile(r"\w+")
HANGUL_RE = re.compile(r"[\uac00-\ud7a3]")
# Words that say "please search" rather than what to search for (the seed's rule sends the whole query).
_STOPWORD_LIST = (
    "a an and are can do does for how i in is it me my of on or the to what when where with "
    "검색 검색해 검색해줘 검색해주세요 찾아줘 찾아 알려줘 알려주세요 부탁해 부탁해요 어떻게 관련"
)
STOPWORDS = frozenset(_STOPWORD_LIST.split())


@cache
def _data() -> dict[str, Any]:
    return json.loads(DATA_FILE.read_text(encoding="utf-8"))


def _terms(q: str) -> list[str]:
    return [w for w in WORD_RE.findall(q.lower()) if len(w) >= 2 and w not in STOPWORDS]


def _variants(term: str) -> list[str]:
    # Korean glues particles and endings onto nouns ("환불은", "검진을"), English adds plurals:
    # try the word and its shorter stems; the best-scoring one counts.
    if HANGUL_RE.match(term):
        return [term[:n] for n in range(len(term), 1, -1)]
    if len(term) > 3 and term.endswith("s"):
        return [term, term[:-1]]
    return [term]


def _score(terms: list[str], doc: dict[str, Any]) -> int:
    title, body = doc["title"].lower(), doc["body"].lower()
    tags = [tag.lower() for tag in doc["tags"]]
    total = 0
    for term in terms:
        total += max(
            3 * title.count(stem) + 2 * sum(tag.startswith(stem) for tag in tags) + body.count(stem)
            for stem in _variants(term)
        )
    return total


class Hit(BaseModel):
    doc_id: str
    title: str
    lang: str
    score: int
    snippet: str


class SearchResult(BaseModel):
    """The tool's declared result (its outputSchema): a rule author sees this shape before calling."""

    query: str
    terms: list[str]
    count: int
    results: list[Hit]


def search_docs(q: str, limit: int = 3) -> SearchResult:
    """Search the help articles (Korean and English) for q; best matches first, at most limit (1-10)."""
    if not q.strip():
        raise ToolError("search_docs needs a non-empty query q.")
    if not 1 <= limit <= MAX_LIMIT:
        raise ToolError(f"limit must be between 1 and {MAX_LIMIT}, got {limit}.")
    terms = _terms(q)
    scored = [(_score(terms, doc), doc) for doc in _data()["docs"]]
    hits = sorted((pair for pair in scored if pair[0] > 0), key=lambda pair: (-pair[0], pair[1]["doc_id"]))
    results = [
        Hit(
            doc_id=doc["doc_id"],
            title=doc["title"],
            lang=doc["lang"],
            score=score,
            snippet=doc["body"][:SNIPPET_CHARS],
        )
        for score, doc in hits[:limit]
    ]
    return SearchResult(query=q, terms=terms, count=len(results), results=results)


def build_server(host: str = "127.0.0.1", port: int = DEFAULT_PORT) -> MCPServer:
    """An MCP server with this module's tools (host/port matter only for --http), on mcp 1.x or 2."""
    # WARNING keeps stderr quiet: the server logs every request at INFO. mcp 1.x takes host and
    # port here (its DNS-rebinding protection follows the host); mcp 2 takes them in run().
    server = MCPServer(SERVER_NAME, log_level="WARNING", **({} if MCP_2 else {"host": host, "port": port}))
    server.tool()(search_docs)
    return server


def main(argv: list[str] | None = None) -> None:
    """Run the server over stdio, or over streamable HTTP with --http."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", action="store_true", help="serve streamable HTTP on /mcp instead of stdio")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    args = parser.parse_args(argv)
    server = build_server(args.host, args.port)
    if args.http:
        print(f"{SERVER_NAME} serving http://{args.host}:{args.port}/mcp", file=sys.stderr, flush=True)
        server.run("streamable-http", **({"host": args.host, "port": args.port} if MCP_2 else {}))
    else:
        server.run(transport="stdio")


if __name__ == "__main__":
    main()
