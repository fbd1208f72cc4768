"""Exports a forger cannot pass: every kind of alteration of a signed export, generated, is refused
by tools/verify_evidence.py with the line it concerns; the untouched file passes with the public key only."""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.util
import io
import json
import random
import subprocess
import sys
from collections.abc import Callable

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.core.management import call_command
from django.urls import reverse

from agents.evidence_rows import canonical, evidence_csv, evidence_jsonl
from agents.models import Agent
from core.chain import chain_public_key, new_signing_key
from tests.conftest import ROOT
from tests.support.evidence import finished_run

pytestmark = pytest.mark.django_db

VERIFIER = ROOT / "tools" / "verify_evidence.py"
_spec = importlib.util.spec_from_file_location("verify_evidence", VERIFIER)
assert _spec and _spec.loader
verifier = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(verifier)

PER_KIND = 8
SEED = base64.urlsafe_b64decode(new_signing_key())


@pytest.fixture
def signed(settings, agent: Agent) -> str:
    settings.LLAMON_CHAIN_SIGNING_KEY = SEED
    for number, calls in enumerate([2, 0, 3, 1, 2, 1]):
        finished_run(agent, f"C-{1000 + number % 2}", f"A-{number}", calls=calls)
    key = chain_public_key()
    assert key
    return key


def _jsonl() -> list[str]:
    return "".join(evidence_jsonl({})).split("\n")[:-1]


def _dump(row: dict) -> str:
    return json.dumps(row, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _blocks(lines: list[str]) -> list[list[int]]:
    """The line indexes of each run's block (its run line and its calls)."""
    blocks: list[list[int]] = []
    for index, line in enumerate(lines[1:-1], start=1):
        if json.loads(line)["type"] == "run":
            blocks.append([])
        blocks[-1].append(index)
    return blocks


def _refused(text: str, key: str) -> str:
    with pytest.raises(verifier.Broken) as caught:
        verifier.verify(text, public_key=key)
    message = str(caught.value)
    assert message.startswith("line "), message
    return message


# --- JSON Lines forgeries ------------------------------------------------------------------------------


def _calls(lines: list[str]) -> list[int]:
    return [i for i, line in enumerate(lines) if i and json.loads(line)["type"] == "call"]


def remove_call(lines: list[str], rng: random.Random) -> list[str]:
    drop = rng.choice(_calls(lines))
    return [line for i, line in enumerate(lines) if i != drop]


def remove_run(lines: list[str], rng: random.Random) -> list[str]:
    drop = set(rng.choice(_blocks(lines)))
    return [line for i, line in enumerate(lines) if i not in drop]


def _edit(lines: list[str], rng: random.Random, change: Callable[[dict], None]) -> list[str]:
    index = rng.randrange(1, len(lines) - 1)
    row = json.loads(lines[index])
    change(row)
    return lines[:index] + [_dump(row)] + lines[index + 1 :]


def edit_version(lines: list[str], rng: random.Random) -> list[str]:
    field, value = rng.choice([("version", "v2"), ("rule_set_hash", "b" * 64), ("rule_set", "other")])
    return _edit(lines, rng, lambda row: row.update({field: value}))


def edit_time(lines: list[str], rng: random.Random) -> list[str]:
    return _edit(lines, rng, lambda row: row.update(time=f"20{rng.randrange(10, 26)}-01-01T00:00:00+00:00"))


def edit_user(lines: list[str], rng: random.Random) -> list[str]:
    field = rng.choice(["user_id", "session_id", "chatbot_id", "agent"])
    return _edit(lines, rng, lambda row: row.update({field: f"X-{rng.randrange(10_000)}"}))


def edit_source(lines: list[str], rng: random.Random) -> list[str]:
    """A worker run passed off as a served one, or the other way round."""
    return _edit(
        lines, rng, lambda row: row.update(source="served" if row["source"] == "worker" else "worker")
    )


def fabricate_run(lines: list[str], rng: random.Random) -> list[str]:
    block = rng.choice(_blocks(lines))
    new_id = 10_000 + rng.randrange(1000)
    copied = []
    for i in block:
        row = json.loads(lines[i])
        row["run"] = new_id
        if row["type"] == "run":
            row["decision"]["run"] = new_id
            row["link"]["ref"] = str(new_id)
            row["link"]["content_hash"] = verifier.sha256(row["decision"])
            row["link"]["record_hash"] = verifier.link_hash(row["link"])
        copied.append(_dump(row))
    at = rng.choice([b[0] for b in _blocks(lines)] + [len(lines) - 1])
    return lines[:at] + copied + lines[at:]


def fabricate_call(lines: list[str], rng: random.Random) -> list[str]:
    index = rng.choice(_calls(lines))
    return lines[: index + 1] + [lines[index]] + lines[index + 1 :]


def reorder(lines: list[str], rng: random.Random) -> list[str]:
    blocks = _blocks(lines)
    pairs = [b for b in blocks if len(b) > 2]
    if rng.random() < 0.5 and pairs:  # two calls of one run
        block = rng.choice(pairs)
        a, b = rng.sample(block[1:], 2)
        out = list(lines)
        out[a], out[b] = out[b], out[a]
        return out
    order = list(range(len(blocks)))
    while order == list(range(len(blocks))):
        rng.shuffle(order)
    body = [lines[i] for n in order for i in blocks[n]]
    return [lines[0], *body, lines[-1]]


def truncate(lines: list[str], rng: random.Random) -> list[str]:
    cut = rng.randrange(1, len(lines))
    if rng.random() < 0.5:
        return lines[:cut]
    return lines[:cut] + [lines[cut][: rng.randrange(1, len(lines[cut]))]]


JSONL_FORGERIES = [
    remove_call,
    remove_run,
    edit_version,
    edit_time,
    edit_user,
    edit_source,
    fabricate_run,
    fabricate_call,
    reorder,
    truncate,
]


def _rehash_jsonl(lines: list[str], resign: str) -> list[str]:
    """A forger who recomputes the manifest (index, counts, digest) but does not hold the key."""
    manifest = json.loads(lines[-1])
    body = lines[:-1]
    index, calls = [], 0
    for block in _blocks(lines):
        text = "".join(body[i] + "\n" for i in block)
        run = json.loads(body[block[0]])
        index.append([run["run"], run["link"]["seq"], hashlib.sha256(text.encode()).hexdigest()])
        calls += len(block) - 1
    manifest.update(index=index, runs=len(index), calls=calls)
    manifest["sha256"] = hashlib.sha256("".join(line + "\n" for line in body).encode()).hexdigest()
    return body + [_dump(_resign(manifest, resign))]


def _resign(manifest: dict, how: str) -> dict:
    if how == "drop":
        manifest.pop("signature", None)
        manifest.pop("public_key", None)
    elif how == "own":
        own = Ed25519PrivateKey.generate()
        unsigned = {k: v for k, v in manifest.items() if k not in ("public_key", "signature")}
        manifest["signature"] = base64.b64encode(own.sign(canonical(unsigned))).decode()
        manifest["public_key"] = base64.b64encode(own.public_key().public_bytes_raw()).decode()
    return manifest  # "keep": the old signature over the old manifest


def _text(lines: list[str]) -> str:
    return "".join(line + "\n" for line in lines)


def test_an_untouched_export_passes_with_the_public_key_alone(signed, tmp_path) -> None:
    for name, text in [("e.jsonl", _text(_jsonl())), ("e.csv", "".join(evidence_csv({})))]:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8", newline="")
        # -S: no site-packages, so the verifier runs on the standard library alone, signature included.
        checked = subprocess.run(
            [sys.executable, "-S", str(VERIFIER), "--public-key", signed, str(path)],
            capture_output=True,
            text=True,
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert "6 runs, 9 calls" in checked.stdout and f"signed by {signed}" in checked.stdout
        other = base64.b64encode(Ed25519PrivateKey.generate().public_key().public_bytes_raw()).decode()
        refused = subprocess.run(
            [sys.executable, "-S", str(VERIFIER), "--public-key", other, str(path)],
            capture_output=True,
            text=True,
        )
        assert refused.returncode == 1 and "signature does not verify" in refused.stdout


@pytest.mark.parametrize("forge", JSONL_FORGERIES, ids=lambda f: f.__name__)
def test_every_forgery_of_a_json_lines_export_is_refused_naming_the_line(signed, forge) -> None:
    lines = _jsonl()
    verifier.verify(_text(lines), public_key=signed)
    rng = random.Random(forge.__name__)
    tried = 0
    for _ in range(PER_KIND):
        forged = forge(lines, rng)
        if forged == lines:
            continue
        tried += 1
        assert not _refused(_text(forged), signed).startswith("line 1:")  # the line concerned, not the header
        if forge is not truncate:  # the forger also recomputes the manifest, without the key
            for how in ("keep", "drop", "own"):
                message = _refused(_text(_rehash_jsonl(forged, how)), signed)
                assert how != "keep" or "line" in message
    assert tried >= PER_KIND // 2


# --- CSV forgeries ---------------------------------------------------------------------------------------


def _csv_rows() -> list[list[str]]:
    text = "".join(evidence_csv({}))
    rows = list(csv.reader(io.StringIO(text.removeprefix("\ufeff"), newline="")))
    assert _csv_text(rows) == text  # the forger writes the rows back as the exporter does
    return rows


def _csv_text(rows: list[list[str]]) -> str:
    buffer = io.StringIO()
    buffer.write("\ufeff")
    csv.writer(buffer).writerows(rows)
    return buffer.getvalue()


def _csv_runs(rows: list[list[str]]) -> list[list[int]]:
    runs: list[list[int]] = []
    for index, row in enumerate(rows[1:-1], start=1):
        if not runs or rows[runs[-1][0]][0] != row[0]:
            runs.append([])
        runs[-1].append(index)
    return runs


def csv_remove_row(rows, rng):
    drop = rng.randrange(1, len(rows) - 1)
    return [r for i, r in enumerate(rows) if i != drop]


def csv_remove_run(rows, rng):
    drop = set(rng.choice(_csv_runs(rows)))
    return [r for i, r in enumerate(rows) if i not in drop]


def csv_edit(rows, rng):
    header = rows[0]
    column = header.index(
        rng.choice(["version", "time", "user_id", "source", "rule_set_hash", "tool", "result"])
    )
    index = rng.randrange(1, len(rows) - 1)
    out = [list(r) for r in rows]
    out[index][column] = out[index][column] + rng.choice(["0", "x", " "])
    return out


def csv_fabricate_run(rows, rng):
    block = rng.choice(_csv_runs(rows))
    new_id = str(10_000 + rng.randrange(1000))
    copied = [[new_id, *rows[i][1:]] for i in block]
    at = rng.randrange(1, len(rows))
    return rows[:at] + copied + rows[at:]


def csv_reorder(rows, rng):
    runs = _csv_runs(rows)
    order = list(range(len(runs)))
    while order == list(range(len(runs))):
        rng.shuffle(order)
    return [rows[0], *[rows[i] for n in order for i in runs[n]], rows[-1]]


def csv_truncate(rows, rng):
    return rows[: rng.randrange(1, len(rows))]


CSV_FORGERIES = [csv_remove_row, csv_remove_run, csv_edit, csv_fabricate_run, csv_reorder, csv_truncate]


def _rehash_csv(rows: list[list[str]], how: str) -> str:
    manifest = json.loads(rows[-1][1])
    body = rows[:-1]
    index, calls = [], 0
    for block in _csv_runs(rows):
        cells = [body[i] for i in block]
        index.append([int(cells[0][0]), None, hashlib.sha256(canonical(cells)).hexdigest()])
        calls += sum(1 for c in cells if c[rows[0].index("rule")])
    manifest.update(index=index, runs=len(index), calls=calls)
    manifest["sha256"] = hashlib.sha256(_csv_text(body).encode()).hexdigest()
    return _csv_text([*body, ["#llamon-evidence-manifest", _dump(_resign(manifest, how))]])


@pytest.mark.parametrize("forge", CSV_FORGERIES, ids=lambda f: f.__name__)
def test_every_forgery_of_a_csv_export_is_refused_naming_the_line(signed, forge) -> None:
    rows = _csv_rows()
    verifier.verify(_csv_text(rows), public_key=signed)
    rng = random.Random(forge.__name__)
    for _ in range(PER_KIND):
        forged = forge(rows, rng)
        assert forged != rows
        assert not _refused(_csv_text(forged), signed).startswith("line 1:")
        if forge is not csv_truncate:
            for how in ("keep", "drop", "own"):
                _refused(_rehash_csv(forged, how), signed)


def test_the_offline_ed25519_check_agrees_with_the_cryptography_package() -> None:
    key = Ed25519PrivateKey.generate()
    public = key.public_key().public_bytes_raw()
    for message in [b"", b"llamon", "증적".encode() * 50]:
        signature = key.sign(message)
        assert verifier.ed25519_verify(public, message, signature)
        assert not verifier.ed25519_verify(public, message + b"!", signature)
        tampered = bytes([signature[0] ^ 1]) + signature[1:]
        assert not verifier.ed25519_verify(public, message, tampered)


def test_without_a_key_the_export_says_it_is_unsigned(settings, agent, capsys) -> None:
    settings.LLAMON_CHAIN_SIGNING_KEY = None
    finished_run(agent, "C-1", "A-1")
    lines = _jsonl()
    manifest = json.loads(lines[-1])
    assert "signature" not in manifest and manifest["unsigned"].startswith("unsigned:")
    runs, calls, how = verifier.verify(_text(lines))
    assert (runs, calls) == (1, 1) and how.startswith("UNSIGNED")
    with pytest.raises(verifier.Broken, match="not signed"):
        verifier.verify(_text(lines), public_key=base64.b64encode(b"k" * 32).decode())


def test_chain_head_prints_the_public_key_to_hand_an_auditor(settings, capsys) -> None:
    settings.LLAMON_CHAIN_SIGNING_KEY = SEED
    call_command("chain_head", "--public-key")
    assert capsys.readouterr().out.strip() == chain_public_key()


def test_the_pages_say_whether_exports_are_signed(settings, viewer_client) -> None:
    settings.LLAMON_CHAIN_SIGNING_KEY = None
    for name in ("agents:run_list", "agents:run_evidence"):
        page = viewer_client.get(reverse(name)).content.decode()
        assert "Unsigned: no signing key is set" in page and "proves nothing against a forger" in page
    settings.LLAMON_CHAIN_SIGNING_KEY = SEED
    page = viewer_client.get(reverse("agents:run_evidence")).content.decode()
    assert f"--public-key {chain_public_key()}" in page and "Unsigned" not in page
