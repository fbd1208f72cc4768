#!/usr/bin/env python3
"""Check a llamon-web evidence export (JSON Lines) offline, with the Python standard library only.

    python3 tools/verify_evidence.py llamon-evidence-20261202-101500.jsonl

What it checks, line by line (docs/evidence.md says what that proves):

1. every ``run`` line: its decision record hashes to the link's ``content_hash``, and the link's
   ``record_hash`` is SHA-256(seq|kind|ref|content_hash|prev_hash); runs whose links follow each
   other in the chain (consecutive ``seq``) are chained (``prev_hash`` = the one before's hash);
2. every ``call`` line: its stored input, output and error hash to the digests its run's decision
   record holds for that step, its params are the input's, and it belongs to the run before it;
3. the ``end`` line: the SHA-256 of every line before it, and the number of runs and calls.

Exit status 0 when everything holds; 1 with the first line that does not, named.
"""

from __future__ import annotations

import hashlib
import json
import sys
from typing import Any


def canonical(value: Any) -> bytes:
    """The exporter's canonical JSON: sorted keys, no whitespace, UTF-8."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8", "surrogatepass")


def sha256(value: Any) -> str:
    return hashlib.sha256(canonical(value)).hexdigest()


def link_hash(link: dict[str, Any]) -> str:
    text = f"{link['seq']}|{link['kind']}|{link['ref']}|{link['content_hash']}|{link['prev_hash']}"
    return hashlib.sha256(text.encode()).hexdigest()


class Broken(Exception):
    pass


def check_run(number: int, row: dict[str, Any], previous_link: dict[str, Any] | None) -> None:
    record, link = row.get("decision"), row.get("link")
    if record is None or link is None:
        raise Broken(f"line {number}: run {row.get('run')} has no evidence link (it had not finished)")
    if record.get("run") != row.get("run") or link.get("ref") != str(row.get("run")):
        raise Broken(f"line {number}: run {row.get('run')}'s decision record or link names another run")
    if sha256(record) != link["content_hash"]:
        raise Broken(f"line {number}: run {row['run']}'s decision record does not match its link's hash")
    if link_hash(link) != link["record_hash"]:
        raise Broken(f"line {number}: run {row['run']}'s link (#{link['seq']}) was changed")
    if (
        previous_link
        and link["seq"] == previous_link["seq"] + 1
        and link["prev_hash"] != previous_link["record_hash"]
    ):
        raise Broken(f"line {number}: link #{link['seq']} does not follow link #{previous_link['seq']}")


def check_call(number: int, row: dict[str, Any], run: dict[str, Any] | None) -> None:
    if run is None or row.get("run") != run.get("run"):
        raise Broken(f"line {number}: a call of run {row.get('run')} outside its run's lines")
    steps = {step[0]: step for step in (run.get("decision") or {}).get("steps", [])}
    step = steps.get(row.get("seq"))
    if step is None:
        raise Broken(f"line {number}: run {row['run']}'s decision record has no step #{row.get('seq')}")
    for name, index in (("input", 6), ("output", 7), ("error", 8)):
        if sha256(row.get(name)) != step[index]:
            raise Broken(f"line {number}: step #{row['seq']} of run {row['run']}: its {name} was changed")
    if (row.get("rule"), row.get("mcp_id"), row.get("tool")) != (step[2], step[4], step[5]):
        raise Broken(f"line {number}: step #{row['seq']} of run {row['run']}: rule or tool was changed")
    params = row["input"].get("params") if isinstance(row.get("input"), dict) else None
    if row.get("params") != params or row.get("result") != row.get("output"):
        raise Broken(f"line {number}: step #{row['seq']} of run {row['run']}: params or result differ")


def verify(lines: list[str]) -> tuple[int, int]:
    digest = hashlib.sha256()
    run: dict[str, Any] | None = None
    previous_link: dict[str, Any] | None = None
    counts = {"runs": 0, "calls": 0}
    for number, text in enumerate(lines, start=1):
        try:
            row = json.loads(text)
        except json.JSONDecodeError as exc:
            raise Broken(f"line {number}: not JSON ({exc})") from None
        kind = row.get("type")
        if kind == "end":
            if number != len(lines):
                raise Broken(f"line {number}: lines follow the end line")
            if row.get("sha256") != digest.hexdigest():
                raise Broken(f"line {number}: the file's lines were changed, added or removed")
            if (row.get("runs"), row.get("calls")) != (counts["runs"], counts["calls"]):
                raise Broken(f"line {number}: the number of runs or calls does not match")
            return counts["runs"], counts["calls"]
        if number == 1 and kind != "export":
            raise Broken("line 1: not a llamon-web evidence export")
        if kind == "run":
            check_run(number, row, previous_link)
            run, previous_link = row, row["link"]
            counts["runs"] += 1
        elif kind == "call":
            check_call(number, row, run)
            counts["calls"] += 1
        elif kind != "export" or number != 1:
            raise Broken(f"line {number}: unknown line type {kind!r}")
        digest.update(text.encode("utf-8", "surrogatepass"))
    raise Broken("the end line is missing: the file was cut short")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8", newline="") as handle:
        text = handle.read()
    # Lines end at "\n" only (str.splitlines would also split inside a value at U+2028 and the like).
    pieces = text.split("\n")
    lines = [piece + "\n" for piece in pieces[:-1]] + ([pieces[-1]] if pieces[-1] else [])
    try:
        runs, calls = verify(lines)
    except Broken as exc:
        print(f"BROKEN: {exc}")
        return 1
    print(f"ok: {runs} runs, {calls} calls; every record matches its evidence link")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
