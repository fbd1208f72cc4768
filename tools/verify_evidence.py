#!/usr/bin/env python3
"""Check a llamon-web evidence export (JSON Lines or CSV) offline, with the Python standard library only.

    python3 tools/verify_evidence.py --public-key KEY llamon-evidence-20261202-101500.jsonl

KEY is the workbench's public key (``manage.py chain_head --public-key``), handed over apart from
the file. With it, the file's signed manifest (its last line) must verify with that key: the
Ed25519 check is in this file (RFC 8032, section 6), nothing to install. What it checks
(docs/evidence.md says what that proves):

1. JSON Lines, every ``run`` line: its decision record hashes to the link's ``content_hash``,
   the link's ``record_hash`` is SHA-256(seq|kind|ref|content_hash|prev_hash), consecutive links
   are chained, and the run's time, agent, version and status are the record's; its ``call``
   lines are exactly the record's rule steps (count, order, and each one's input, output, error,
   rule and tool);
2. the manifest: its signature (with --public-key: required, and by that key), then every run
   of the manifest's index in its order, each run's lines hashing to the digest it signed (a
   run added, removed, moved or edited is named with its line), the counts, and the digest of
   the whole file before it (the header).

Exit status 0 when everything holds; 1 with the first line that does not, named.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import csv
import hashlib
import io
import json
import sys
from typing import Any

CSV_MANIFEST = "#llamon-evidence-manifest"
HEAD_FORMAT = "llamon-chain-head/1"


class Broken(Exception):
    pass


def canonical(value: Any) -> bytes:
    """The exporter's canonical JSON: sorted keys, no whitespace, UTF-8."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8", "surrogatepass")


def sha256(value: Any) -> str:
    return hashlib.sha256(canonical(value)).hexdigest()


def link_hash(link: dict[str, Any]) -> str:
    text = f"{link['seq']}|{link['kind']}|{link['ref']}|{link['content_hash']}|{link['prev_hash']}"
    return hashlib.sha256(text.encode()).hexdigest()


# --- Ed25519 signature check (RFC 8032, section 6: the reference verification) ---------------------

_P = 2**255 - 19
_L = 2**252 + 27742317777372353535851937790883648493
_D = -121665 * pow(121666, _P - 2, _P) % _P
_SQRT_M1 = pow(2, (_P - 1) // 4, _P)


def _add(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    x = (a[1] - a[0]) * (b[1] - b[0]) % _P
    y = (a[1] + a[0]) * (b[1] + b[0]) % _P
    c = 2 * a[3] * b[3] * _D % _P
    d = 2 * a[2] * b[2] % _P
    e, f, g, h = y - x, d - c, d + c, y + x
    return (e * f % _P, g * h % _P, f * g % _P, e * h % _P)


def _mul(s: int, point: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    out = (0, 1, 1, 0)
    while s > 0:
        if s & 1:
            out = _add(out, point)
        point = _add(point, point)
        s >>= 1
    return out


def _recover_x(y: int, sign: int) -> int | None:
    if y >= _P:
        return None
    x2 = (y * y - 1) * pow(_D * y * y + 1, _P - 2, _P) % _P
    if x2 == 0:
        return None if sign else 0
    x = pow(x2, (_P + 3) // 8, _P)
    if (x * x - x2) % _P:
        x = x * _SQRT_M1 % _P
    if (x * x - x2) % _P:
        return None
    return _P - x if (x & 1) != sign else x


def _point(raw: bytes) -> tuple[int, int, int, int] | None:
    if len(raw) != 32:
        return None
    y = int.from_bytes(raw, "little")
    sign, y = y >> 255, y & ((1 << 255) - 1)
    x = _recover_x(y, sign)
    return None if x is None else (x, y, 1, x * y % _P)


_GY = 4 * pow(5, _P - 2, _P) % _P
_G = (_recover_x(_GY, 0) or 0, _GY, 1, (_recover_x(_GY, 0) or 0) * _GY % _P)


def ed25519_verify(public: bytes, message: bytes, signature: bytes) -> bool:
    if len(signature) != 64:
        return False
    a, r = _point(public), _point(signature[:32])
    s = int.from_bytes(signature[32:], "little")
    if a is None or r is None or s >= _L:
        return False
    h = int.from_bytes(hashlib.sha512(signature[:32] + public + message).digest(), "little") % _L
    left, right = _mul(s, _G), _add(r, _mul(h, a))
    return not (
        (left[0] * right[2] - right[0] * left[2]) % _P or (left[1] * right[2] - right[1] * left[2]) % _P
    )


def _b64(text: Any) -> bytes:
    try:
        return base64.b64decode(str(text), validate=True)
    except (ValueError, binascii.Error):
        return b""


# --- JSON Lines: each run's lines against its decision record ---------------------------------------

RUN_FIELDS = (("agent", "agent"), ("source", "source"), ("run_status", "status"), ("candidate", "candidate"))


def check_run(number: int, row: dict[str, Any], previous_link: dict[str, Any] | None) -> None:
    record, link = row.get("decision"), row.get("link")
    if not isinstance(record, dict) or not isinstance(link, dict):
        raise Broken(f"line {number}: run {row.get('run')} has no evidence link (it had not finished)")
    if record.get("run") != row.get("run") or link.get("ref") != str(row.get("run")):
        raise Broken(f"line {number}: run {row.get('run')}'s decision record or link names another run")
    if sha256(record) != link.get("content_hash"):
        raise Broken(f"line {number}: run {row['run']}'s decision record does not match its link's hash")
    if link_hash(link) != link["record_hash"]:
        raise Broken(f"line {number}: run {row['run']}'s link (#{link['seq']}) was changed")
    if (
        previous_link
        and link["seq"] == previous_link["seq"] + 1
        and link["prev_hash"] != previous_link["record_hash"]
    ):
        raise Broken(f"line {number}: link #{link['seq']} does not follow link #{previous_link['seq']}")
    if row.get("time") != record.get("created_at"):
        raise Broken(f"line {number}: run {row['run']}'s time is not its record's")
    check_run_fields(number, row, record)


def check_run_fields(number: int, row: dict[str, Any], record: dict[str, Any]) -> None:
    version = record.get("rule_set") or {}
    shown = (row.get("rule_set"), row.get("version"), row.get("rule_set_hash"))
    if shown != (version.get("name"), version.get("ref"), version.get("hash")):
        raise Broken(f"line {number}: run {row.get('run')}'s version is not its record's")
    for column, key in RUN_FIELDS:
        if row.get(column) != record.get(key):
            raise Broken(f"line {number}: run {row.get('run')}'s {column} is not its record's")


def check_call(number: int, row: dict[str, Any], run: dict[str, Any] | None, step: list[Any] | None) -> None:
    if run is None or row.get("run") != run.get("run"):
        raise Broken(f"line {number}: a call of run {row.get('run')} outside its run's lines")
    if step is None:
        raise Broken(
            f"line {number}: run {row['run']} has more calls than its decision record: one was added"
        )
    if row.get("seq") != step[0]:
        raise Broken(
            f"line {number}: run {row['run']}'s decision record has step #{step[0]} here, not"
            f" #{row.get('seq')}: calls were removed or reordered"
        )
    for name, index in (("input", 6), ("output", 7), ("error", 8)):
        if sha256(row.get(name)) != step[index]:
            raise Broken(f"line {number}: step #{row['seq']} of run {row['run']}: its {name} was changed")
    if (row.get("rule"), row.get("mcp_id"), row.get("tool")) != (step[2], step[4], step[5]):
        raise Broken(f"line {number}: step #{row['seq']} of run {row['run']}: rule or tool was changed")
    params = row["input"].get("params") if isinstance(row.get("input"), dict) else None
    if row.get("params") != params or row.get("result") != row.get("output"):
        raise Broken(f"line {number}: step #{row['seq']} of run {row['run']}: params or result differ")
    if row.get("status") != step[3]:
        raise Broken(f"line {number}: step #{row['seq']} of run {row['run']}: its status was changed")
    if len(step) > 9 and row.get("time") != (step[9] or run["decision"].get("created_at")):
        raise Broken(f"line {number}: step #{row['seq']} of run {row['run']}: its time was changed")
    check_run_fields(number, row, run["decision"])


def _rule_steps(run: dict[str, Any]) -> list[list[Any]]:
    return [step for step in (run.get("decision") or {}).get("steps", []) if step[1] == "rule"]


def jsonl_runs(lines: list[str]) -> list[tuple[int, Any, int, str]]:
    """The runs of a JSON Lines export, each checked against its record: (first line, run id,
    number of calls, digest of its lines)."""
    runs: list[tuple[int, Any, int, str]] = []
    run: dict[str, Any] | None = None
    previous_link: dict[str, Any] | None = None
    expected: list[list[Any]] = []
    start, calls, chunk = 0, 0, hashlib.sha256()

    def close(number: int) -> None:
        if run is not None:
            if calls < len(expected):
                raise Broken(
                    f"line {number}: run {run['run']} (line {start}) has {calls} of the {len(expected)}"
                    " calls its decision record holds: calls were removed"
                )
            runs.append((start, run["run"], calls, chunk.hexdigest()))

    for number, text in enumerate(lines, start=1):
        try:
            row = json.loads(text)
        except json.JSONDecodeError as exc:
            raise Broken(f"line {number}: not JSON ({exc})") from None
        if not isinstance(row, dict):
            raise Broken(f"line {number}: not a line of an evidence export")
        kind = row.get("type")
        if number == 1:
            if kind != "export":
                raise Broken("line 1: not a llamon-web evidence export")
            continue
        if kind == "run":
            close(number)
            check_run(number, row, previous_link)
            run, previous_link, expected = row, row["link"], _rule_steps(row)
            start, calls, chunk = number, 0, hashlib.sha256()
        elif kind == "call":
            check_call(
                number, row, run, expected[calls] if run is not None and calls < len(expected) else None
            )
            calls += 1
        else:
            raise Broken(f"line {number}: unknown line type {kind!r}")
        chunk.update(text.encode("utf-8", "surrogatepass"))
    close(len(lines) + 1)
    return runs


def csv_runs(text: str) -> list[tuple[int, Any, int, str]]:
    """The runs of a CSV export, rows grouped by run: (first line, run id, calls, digest of its rows)."""
    reader = csv.reader(io.StringIO(text.removeprefix("\ufeff"), newline=""))
    try:
        header = next(reader)
    except StopIteration:
        raise Broken("line 1: not a llamon-web evidence export") from None
    if header[:1] != ["run"] or "record_hash" not in header:
        raise Broken("line 1: not a llamon-web evidence export")
    rule = header.index("rule")
    runs: list[tuple[int, Any, int, str]] = []
    seen: set[str] = set()
    current: list[list[str]] = []
    start = 0

    def close() -> None:
        if current:
            calls = sum(1 for cells in current if cells[rule : rule + 1] != [""])
            runs.append((start, _int(current[0][0]), calls, sha256(current)))

    while True:
        line = reader.line_num + 1
        try:
            cells = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            raise Broken(f"line {line}: not CSV ({exc})") from None
        if current and cells[:1] == current[0][:1]:
            current.append(cells)
            continue
        close()
        if cells[:1] and cells[0] in seen:
            raise Broken(f"line {line}: run {cells[0]}'s rows are not together: rows were moved")
        seen.add(cells[0] if cells else "")
        current, start = [cells], line
    close()
    return runs


def _int(text: str) -> Any:
    return int(text) if text.isdigit() else text


# --- The signed manifest -----------------------------------------------------------------------------


def check_signature(manifest: dict[str, Any], where: str, public_key: str | None) -> str:
    """How the manifest is signed (a sentence for the verdict), or Broken."""
    unsigned = {k: v for k, v in manifest.items() if k not in ("public_key", "signature")}
    if "signature" not in manifest:
        if public_key:
            raise Broken(f"{where}: the manifest is not signed; a file checked against a key must be signed")
        return "UNSIGNED: the file is whole, but anyone could have made it (no signing key was set)"
    key = _b64(public_key or manifest.get("public_key"))
    if not ed25519_verify(key, canonical(unsigned), _b64(manifest["signature"])):
        raise Broken(
            f"{where}: the manifest's signature does not verify: it was edited, or signed by another key"
        )
    head = manifest.get("chain_head") or {}
    message = f"{HEAD_FORMAT}|{head.get('seq')}|{head.get('record_hash')}|{head.get('at')}".encode()
    if "signature" in head and not ed25519_verify(key, message, _b64(head["signature"])):
        raise Broken(f"{where}: the chain head's signature does not verify with this key")
    if public_key:
        return f"signed by {public_key}"
    return (
        f"signed by the key the file names ({manifest.get('public_key')}); "
        "pass --public-key to prove it is the workbench's"
    )


def check_index(
    runs: list[tuple[int, Any, int, str]], manifest: dict[str, Any], where: str
) -> tuple[int, int]:
    index = manifest.get("index")
    if not isinstance(index, list):
        raise Broken(f"{where}: the manifest has no index of runs")
    signed = {entry[0]: position for position, entry in enumerate(index)}
    for position, (line, run_id, _calls, digest) in enumerate(runs):
        if position >= len(index) or run_id not in signed:
            raise Broken(f"line {line}: run {run_id} is not in the signed manifest: it was added")
        expected = index[position]
        if run_id != expected[0]:
            if signed[run_id] > position and expected[0] not in {r[1] for r in runs}:
                raise Broken(
                    f"line {line}: run {expected[0]} (chain link #{expected[1]}) is missing before it: it was removed"
                )
            raise Broken(f"line {line}: run {run_id} is out of the signed order: runs were reordered")
        if digest != expected[2]:
            raise Broken(f"line {line}: run {run_id}'s lines are not the ones signed: they were changed")
    if len(runs) < len(index):
        run_id, seq = index[len(runs)][0], index[len(runs)][1]
        raise Broken(f"{where}: run {run_id} (chain link #{seq}) is missing: runs were removed")
    calls = sum(r[2] for r in runs)
    if (manifest.get("runs"), manifest.get("calls")) != (len(runs), calls):
        raise Broken(f"{where}: the number of runs or calls does not match")
    return len(runs), calls


def verify(text: str, *, public_key: str | None = None) -> tuple[int, int, str]:
    """(runs, calls, how it is signed) of a whole export, or Broken naming the line."""
    if text.lstrip("\ufeff").startswith("{"):
        pieces = text.split("\n")  # lines end at "\n" only (not at U+2028 inside a value)
        lines = [piece + "\n" for piece in pieces[:-1]] + ([pieces[-1]] if pieces[-1] else [])
        if not lines:
            raise Broken("line 1: the file is empty")
        try:
            manifest = json.loads(lines[-1])
        except json.JSONDecodeError:
            manifest = None
        if not isinstance(manifest, dict) or manifest.get("type") != "end":
            raise Broken(f"line {len(lines)}: the file ends without its signed manifest: it was cut short")
        where, body = f"line {len(lines)} (the manifest)", "".join(lines[:-1])
        runs = jsonl_runs(lines[:-1])
    else:
        at = text.rfind("\n" + CSV_MANIFEST + ",")
        last = text.count("\n", 0, at) + 2
        if at < 0:
            raise Broken(
                f"line {text.count(chr(10)) + 1}: the file ends without its signed manifest: it was cut short"
            )
        rows = list(csv.reader(io.StringIO(text[at + 1 :], newline="")))
        try:
            manifest = json.loads(rows[0][1]) if len(rows) == 1 else None
        except (IndexError, json.JSONDecodeError):
            manifest = None
        if not isinstance(manifest, dict):
            raise Broken(f"line {last}: the manifest row is not the file's last, or not JSON")
        where, body = f"line {last} (the manifest)", text[: at + 1]
        runs = csv_runs(body)
    signed = check_signature(manifest, where, public_key)
    counted = check_index(runs, manifest, where)
    if hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest() != manifest.get("sha256"):
        raise Broken("line 1: the file's first line (the header) was changed")
    return counted[0], counted[1], signed


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Check a llamon-web evidence export offline.")
    parser.add_argument(
        "--public-key", help="the workbench's Ed25519 public key (base64): required signature"
    )
    parser.add_argument("file")
    args = parser.parse_args(argv[1:])
    with open(args.file, encoding="utf-8", newline="") as handle:
        text = handle.read()
    try:
        runs, calls, signed = verify(text, public_key=args.public_key)
    except Broken as exc:
        print(f"BROKEN: {exc}")
        return 1
    print(f"ok: {runs} runs, {calls} calls; every record matches its evidence link; {signed}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
