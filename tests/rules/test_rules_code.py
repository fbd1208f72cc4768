"""Rules as code: ``llamon rules pull/diff/push/test`` against a real workbench (live_server), in a git repository.

The CLI runs in process (``main([...])``) and talks HTTP to the live server with an API token from
the environment. ``llamon rules test`` needs no server: tests/engine/test_cli_rules_test.py.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from accounts.token_services import token_create
from llamon_agent.cli import main
from llamon_web.demo import SEED_RULES
from rules import cases, services
from tests.support.rule_sets import build_rule_set

pytestmark = pytest.mark.django_db(transaction=True)


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def test_a_rule_set_round_trips_through_a_git_repository(
    live_server, demo_servers, make_user, monkeypatch, tmp_path, capsys
) -> None:
    author = make_user("editor")
    rule_set = build_rule_set(author, "support", SEED_RULES)
    cases.case_create(
        actor=author,
        rule_set=rule_set,
        name="주문 조회",
        input={"query": "주문 조회 A-1001"},
        expected={"must_fire": [{"tool_name": "get_order", "params": {"query": "주문 조회 A-1001"}}]},
    )
    monkeypatch.setenv("LLAMON_URL", live_server.url)
    monkeypatch.setenv("LLAMON_TOKEN", token_create(actor=author, name="ci").secret)
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    tree = repo / "rules-support"

    assert main(["rules", "pull", "support", str(tree)]) == 0
    files = sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*.json"))
    assert files == [
        "cases/주문_조회.json",
        "rules/010-route_order_lookup.json",
        "rules/020-route_by_chatbot_id.json",
        "rules/030-route_by_available_tool.json",
        "ruleset.json",
    ]
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "pull")
    assert main(["rules", "pull", "support", str(tree)]) == 0  # a second pull: byte-identical
    assert _git(repo, "status", "--porcelain") == ""
    assert main(["rules", "diff", str(tree)]) == 0

    rule_file = tree / "rules/010-route_order_lookup.json"
    rule = json.loads(rule_file.read_text(encoding="utf-8"))
    rule["when"] = '"주문" in ctx.query'
    rule_file.write_text(
        json.dumps(rule, ensure_ascii=False, indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )
    (tree / "cases/주문_조회.json").unlink()  # the file is the whole suite: the case goes on push
    capsys.readouterr()
    assert main(["rules", "diff", str(tree)]) == 1
    shown = capsys.readouterr().out
    assert (
        '~ rule route_order_lookup: when: \'"주문" in ctx.query and "조회" in ctx.query\' -> \'"주문" in ctx.query\''
        in shown
    )
    assert "- case 주문 조회" in shown

    assert main(["rules", "push", str(tree)]) == 0
    edited = rule_file.read_bytes()
    rule_set.refresh_from_db()
    assert rule_set.rules.get(name="route_order_lookup").when == '"주문" in ctx.query'
    assert not rule_set.cases.exists()
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "edit")
    assert main(["rules", "pull", "support", str(tree)]) == 0
    assert rule_file.read_bytes() == edited and _git(repo, "status", "--porcelain") == ""

    # Someone edits the set on the workbench: the directory's base is stale and the push is refused.
    first = rule_set.rules.get(name="route_by_chatbot_id")
    services.rule_update(actor=author, rule=first, revision=first.revision, description="changed on the page")
    rule["when"] = "True"
    rule_file.write_text(
        json.dumps(rule, ensure_ascii=False, indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )
    capsys.readouterr()
    assert main(["rules", "push", str(tree)]) == 2
    err = capsys.readouterr().err
    assert "changed on the workbench since the content the directory was pulled at" in err
    assert (
        '~ rule route_by_chatbot_id: description changed on the workbench since the pull: "A2A context의 '
        'chatbotId에 따라 CRM lookup을 확정 호출." -> "changed on the page"'
    ) in err
    assert rule_set.rules.get(name="route_order_lookup").when == '"주문" in ctx.query'

    # The server's refusals are one clear line each.
    monkeypatch.setenv("LLAMON_TOKEN", "llamon_00000000_wrong")
    assert main(["rules", "pull", "support", str(tmp_path / "x")]) == 2
    assert "refused the token (401" in capsys.readouterr().err
    monkeypatch.setenv("LLAMON_TOKEN", token_create(actor=author, name="ci2").secret)
    assert main(["rules", "pull", "suport", str(tmp_path / "x")]) == 2
    assert "has no rule set 'suport'; did you mean 'support'?" in capsys.readouterr().err
    assert main(["rules", "pull", "support", str(tmp_path / "x"), "--url", "http://127.0.0.1:9"]) == 2
    assert "cannot reach the workbench at http://127.0.0.1:9" in capsys.readouterr().err


def test_push_with_publish_publishes_or_opens_a_change_request_on_a_protected_agent(
    live_server, demo_servers, make_user, monkeypatch, tmp_path, capsys
) -> None:
    from agents import services as agent_services
    from agents.models import Agent, ChangeRequest

    author = make_user("editor")
    rule_set = build_rule_set(author, "support", SEED_RULES)
    monkeypatch.setenv("LLAMON_URL", live_server.url)
    monkeypatch.setenv("LLAMON_TOKEN", token_create(actor=author, name="ci").secret)
    tree = tmp_path / "rules-support"
    assert main(["rules", "pull", "support", str(tree)]) == 0

    # Nothing to push, the draft never published: --publish publishes it.
    capsys.readouterr()
    assert main(["rules", "push", str(tree), "--publish", "--message", "from git"]) == 0
    assert "published v1" in capsys.readouterr().out
    assert rule_set.versions.get().message == "from git"
    assert main(["rules", "push", str(tree), "--publish"]) == 0  # again: nothing to publish, no error
    assert "nothing to publish: the draft is v1" in capsys.readouterr().out

    # A protected agent serves the set's latest version: the publish becomes a change request.
    agent = Agent.objects.create(
        name="bank-bot", system_prompt="p", rule_set=rule_set, rule_set_mode="latest"
    )
    agent_services.agent_protect(actor=make_user("admin"), agent=agent, protected=True, approvals_required=1)
    rule_file = tree / "rules/010-route_order_lookup.json"
    rule = json.loads(rule_file.read_text(encoding="utf-8"))
    rule["when"] = '"주문" in ctx.query'
    rule_file.write_text(
        json.dumps(rule, ensure_ascii=False, indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )
    assert main(["rules", "push", str(tree), "--publish", "--reason", "x" * 2001]) == 2
    assert "refused it" in capsys.readouterr().err  # the reason is bounded; the draft was saved
    assert main(["rules", "push", str(tree), "--publish", "--reason", "ticket BANK-12"]) == 0
    out = capsys.readouterr().out
    change = ChangeRequest.objects.get()
    assert f"change request #{change.pk}" in out and f"{live_server.url}/" in out
    assert change.action == "rule_set.publish" and change.reason == "ticket BANK-12"
    assert rule_set.versions.count() == 1  # nothing published until it is approved
