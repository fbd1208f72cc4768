"""Rules in git for a team (issue 43): the documented workflow across many merges, with a real git
repository, a bare remote and a fresh clone for every merge and every CI run, against a live
workbench. A push is based on the content the directory was pulled at (committed in ruleset.json),
so the CI's own earlier pushes never make a later merge stale; a change made on the workbench
meanwhile is refused, with the lines to resolve."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from accounts.token_services import token_create
from llamon_agent.cli import main
from llamon_web.demo import SEED_RULES
from rules import cases, engine, services
from rules.models import Rule
from tests.support.rule_sets import build_rule_set

pytestmark = pytest.mark.django_db(transaction=True)
SET_DIR = "rules/support"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def _clone(remote: Path, where: Path) -> Path:
    subprocess.run(["git", "clone", "-q", str(remote), str(where)], check=True, capture_output=True)
    return where


def _write(path: Path, value: dict) -> None:
    path.write_text(json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _ci(remote: Path, where: Path) -> int:
    """The documented workflow's job on main: a fresh checkout, the cases, then the push."""
    checkout = _clone(remote, where)
    assert main(["rules", "test", str(checkout / SET_DIR)]) == 0
    return main(["rules", "push", str(checkout / SET_DIR)])


def test_ten_merges_from_fresh_clones_all_push_and_a_concurrent_edit_is_refused_with_its_diff(
    live_server, demo_servers, make_user, monkeypatch, tmp_path, capsys
) -> None:
    author = make_user("editor")
    rule_set = build_rule_set(author, "support", SEED_RULES)
    cases.case_create(
        actor=author,
        rule_set=rule_set,
        name="order",
        input={"query": "주문 조회 A-1"},
        expected={"must_fire": [{"tool_name": "get_order", "params": {"query": "주문 조회 A-1"}}]},
    )
    monkeypatch.setenv("LLAMON_URL", live_server.url)
    monkeypatch.setenv("LLAMON_TOKEN", token_create(actor=author, name="ci").secret)

    remote = tmp_path / "origin.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
    first = _clone(remote, tmp_path / "first")
    _git(first, "checkout", "-q", "-b", "main")
    assert main(["rules", "pull", "support", str(first / SET_DIR)]) == 0
    _git(first, "add", "-A")
    _git(first, "commit", "-q", "-m", "pull the support rules")
    _git(first, "push", "-q", "origin", "main")

    for i in range(10):
        # A developer's merge: a fresh clone, one change, merged into main (pushed to the remote).
        dev = _clone(remote, tmp_path / f"dev-{i}")
        rules_dir = dev / SET_DIR / "rules"
        if i % 2 == 0:  # add a rule
            _write(
                rules_dir / f"9{i:02d}-route_topic_{i}.json",
                {
                    "name": f"route_topic_{i}",
                    "description": f"topic {i}",
                    "mcp_id": "knowledge-base",
                    "tool_name": "search_docs",
                    "when": f'"topic{i}" in ctx.query',
                    "params": '{"q": ctx.query}',
                    "stop": False,
                    "enabled": True,
                },
            )
        else:  # edit an existing rule
            path = next(rules_dir.glob("*route_by_chatbot_id.json"))
            rule = json.loads(path.read_text(encoding="utf-8"))
            rule["description"] = f"edited in merge {i}"
            _write(path, rule)
        _git(dev, "add", "-A")
        _git(dev, "commit", "-q", "-m", f"merge {i}")
        _git(dev, "push", "-q", "origin", "HEAD:main")
        # The CI job of that merge, from its own fresh checkout.
        assert _ci(remote, tmp_path / f"ci-{i}") == 0, capsys.readouterr().err

    names = list(Rule.objects.filter(rule_set=rule_set).order_by("position").values_list("name", flat=True))
    assert names[-5:] == [f"route_topic_{i}" for i in range(0, 10, 2)]
    assert rule_set.rules.get(name="route_by_chatbot_id").description == "edited in merge 9"

    # A real concurrent change: someone edits a rule on the workbench's page meanwhile.
    edited = rule_set.rules.get(name="route_order_lookup")
    services.rule_update(actor=author, rule=edited, revision=edited.revision, when='"주문" in ctx.query')
    dev = _clone(remote, tmp_path / "dev-late")
    path = next((dev / SET_DIR / "rules").glob("*route_topic_0.json"))
    rule = json.loads(path.read_text(encoding="utf-8"))
    rule["description"] = "a late merge"
    _write(path, rule)
    _git(dev, "commit", "-q", "-am", "late merge")
    _git(dev, "push", "-q", "origin", "HEAD:main")
    before = engine.rule_set_snapshot(rule_set)
    capsys.readouterr()
    assert _ci(remote, tmp_path / "ci-late") == 2
    err = capsys.readouterr().err
    assert "changed on the workbench since the content the directory was pulled at" in err
    assert (
        "~ rule route_order_lookup: when changed on the workbench since the pull: "
        '"\\"주문\\" in ctx.query and \\"조회\\" in ctx.query" -> "\\"주문\\" in ctx.query"; '
        'the push has "\\"주문\\" in ctx.query and \\"조회\\" in ctx.query"'
    ) in err, err
    assert engine.rule_set_snapshot(rule_set) == before  # nothing was written

    # Resolved as the message says: pull into a clean checkout, commit, merge; the next run pushes.
    fix = _clone(remote, tmp_path / "fix")
    assert main(["rules", "pull", "support", str(fix / SET_DIR)]) == 0
    changed = _git(fix, "status", "--porcelain").split("\n")
    assert any("route_order_lookup" in line for line in changed)  # the workbench's edit, taken
    # The pull also shows the late merge undone (the workbench never got it): keep main's side.
    path = next((fix / SET_DIR / "rules").glob("*route_topic_0.json"))
    rule = json.loads(path.read_text(encoding="utf-8"))
    _write(path, {**rule, "description": "a late merge"})
    _git(fix, "add", "-A")
    _git(fix, "commit", "-q", "-m", "take the workbench's edit")
    _git(fix, "push", "-q", "origin", "HEAD:main")
    assert _ci(remote, tmp_path / "ci-fixed") == 0
    rule_set.refresh_from_db()
    assert rule_set.rules.get(name="route_order_lookup").when == '"주문" in ctx.query'
    assert rule_set.rules.get(name="route_topic_0").description == "a late merge"


def test_a_push_from_a_branch_that_lacks_an_earlier_merge_is_refused(
    live_server, demo_servers, make_user, monkeypatch, tmp_path, capsys
) -> None:
    """The base alone would let an old branch push over a newer main: the three-way check does not."""
    author = make_user("editor")
    build_rule_set(author, "support", SEED_RULES)
    monkeypatch.setenv("LLAMON_URL", live_server.url)
    monkeypatch.setenv("LLAMON_TOKEN", token_create(actor=author, name="ci").secret)
    old = tmp_path / "old"
    assert main(["rules", "pull", "support", str(old)]) == 0
    new = tmp_path / "new"
    assert main(["rules", "pull", "support", str(new)]) == 0
    path = next((new / "rules").glob("*route_by_chatbot_id.json"))
    rule = json.loads(path.read_text(encoding="utf-8"))
    rule["when"] = "True"
    _write(path, rule)
    assert main(["rules", "push", str(new)]) == 0
    other = next((old / "rules").glob("*route_order_lookup.json"))
    rule = json.loads(other.read_text(encoding="utf-8"))
    rule["description"] = "old branch"
    _write(other, rule)
    capsys.readouterr()
    assert main(["rules", "push", str(old)]) == 2
    assert (
        "~ rule route_by_chatbot_id: when changed on the workbench since the pull" in capsys.readouterr().err
    )


def test_a_rule_on_a_server_new_to_the_set_is_tested_locally_as_on_the_workbench(
    live_server, demo_servers, make_user, monkeypatch, tmp_path, capsys
) -> None:
    """The pull carries every registered server's tools: a rule added in git on a server the set did
    not use yet gets the workbench's answer from ``llamon rules test``, not a 'not loaded' failure."""
    author = make_user("editor")
    rule_set = build_rule_set(author, "support", SEED_RULES[:1])  # order-service only
    monkeypatch.setenv("LLAMON_URL", live_server.url)
    monkeypatch.setenv("LLAMON_TOKEN", token_create(actor=author, name="ci").secret)
    tree = tmp_path / "support"
    assert main(["rules", "pull", "support", str(tree)]) == 0
    _write(
        tree / "rules/020-route_faq.json",
        {
            "name": "route_faq",
            "mcp_id": "knowledge-base",
            "tool_name": "search_docs",
            "when": '"faq" in query',
            "params": '{"q": query}',
        },
    )
    _write(
        tree / "cases/faq.json",
        {
            "name": "faq",
            "input": {"query": "faq please"},
            "expected": {"must_fire": [{"tool_name": "search_docs", "params": {"q": "faq please"}}]},
        },
    )
    _write(tree / "cases/order.json", {"name": "order", "input": {"query": "주문 조회"}, "expected": {}})
    capsys.readouterr()
    assert main(["rules", "test", str(tree)]) == 1  # "order" expects nothing, get_order fires
    local = capsys.readouterr().out
    assert "ok   faq" in local and "FAIL order" in local and "로드되지 않음" not in local
    assert main(["rules", "push", str(tree)]) == 0
    suite = cases.suite_run(rule_set=rule_set)
    assert {r.case.name: r.result.passed for r in suite.results} == {"faq": True, "order": False}
