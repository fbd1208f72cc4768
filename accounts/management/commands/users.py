"""``manage.py users``: the users page from the command line (list, add, invite, set-role, deactivate, activate).

Changes are audited like the page's: as the admin named by ``--actor`` when given, else as
"system". Refusals (a duplicate name, an unknown role, the last active admin) print one line
and exit with status 1; nothing is changed. While any agent is protected, making someone an admin
or reactivating an admin is a change request like on the page (the command is no way around it):
it prints the request and exits with status 2; someone else approves it (docs/governance.md).
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts import services as user_services
from accounts.roles import ROLES
from core.errors import DomainError, PendingApproval


class Command(BaseCommand):
    help = "List, add or invite users, set their role, deactivate or reactivate them (audited)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--actor", help="the admin this change is recorded as (default: system)")
        sub = parser.add_subparsers(dest="action", required=True, parser_class=type(parser))
        listing = sub.add_parser("list", help="every user with role, state, last login and active tokens")
        listing.add_argument("--json", action="store_true", help="one JSON array on stdout")
        add = sub.add_parser("add", help="add a user; without --password a set-password link is printed")
        add.add_argument("username")
        add.add_argument("--email", default="")
        add.add_argument("--role", default="viewer", help="viewer, editor or admin (default viewer)")
        add.add_argument(
            "--password-env",
            metavar="VARIABLE",
            help="read the password from this environment variable (never from the command line)",
        )
        invite = sub.add_parser("invite", help="print a new one-time set-password link for a user")
        invite.add_argument("username")
        invite.add_argument(
            "--base-url", default="http://127.0.0.1:8000", help="the site's address for the link"
        )
        role = sub.add_parser("set-role", help="give a user exactly one role")
        role.add_argument("username")
        role.add_argument("role", help="viewer, editor or admin")
        for name in ("deactivate", "activate"):
            one = sub.add_parser(name, help=f"{name} a user")
            one.add_argument("username")
        add.add_argument(
            "--base-url", default="http://127.0.0.1:8000", help="the site's address for the link"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            actor = self._actor(options.get("actor"))
            getattr(self, "do_" + options["action"].replace("-", "_"))(actor, options)
        except PendingApproval as exc:  # recorded as a change request, not applied
            raise CommandError(f"{exc} ({exc.url})", returncode=2) from None
        except (DomainError, PermissionDenied) as exc:
            raise CommandError(getattr(exc, "message", None) or str(exc)) from None

    def _user(self, username: str) -> Any:
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user named {username!r}.")
        return user

    def _actor(self, username: str | None) -> Any:
        if not username:
            return None
        actor = self._user(username)
        if not actor.is_active or user_services.role_of(actor) != "admin":
            raise CommandError(f"--actor {username!r} is not an active admin.")
        return actor

    def do_list(self, actor: Any, options: dict[str, Any]) -> None:
        rows = [
            {
                "username": u.username,
                "email": u.email,
                "role": user_services.role_of(u),
                "is_active": u.is_active,
                "last_login": u.last_login.isoformat() if u.last_login else None,
                "active_tokens": u.active_tokens,
            }
            for u in user_services.user_list()
        ]
        if options["json"]:
            self.stdout.write(json.dumps(rows, ensure_ascii=False))
            return
        for row in rows:
            self.stdout.write(
                f"{row['username']:<24} {row['role'] or '-':<7} {'active' if row['is_active'] else 'deactivated':<12} "
                f"last login {row['last_login'] or 'never'}  tokens {row['active_tokens']}"
            )

    def do_add(self, actor: Any, options: dict[str, Any]) -> None:
        import os

        password = None
        if options["password_env"]:
            password = os.environ.get(options["password_env"])
            if not password:
                raise CommandError(f"{options['password_env']} is not set.")
        if options["role"] not in ROLES:
            raise CommandError(f"The role must be one of {', '.join(ROLES)}, got {options['role']!r}.")
        user = user_services.user_create(
            actor=actor,
            username=options["username"],
            email=options["email"],
            role=options["role"],
            password=password,
        )
        self.stdout.write(f"Added {user.username} ({options['role']}).")
        if password is None:
            self._print_invite(actor, user, options["base_url"])

    def do_invite(self, actor: Any, options: dict[str, Any]) -> None:
        self._print_invite(actor, self._user(options["username"]), options["base_url"])

    def _print_invite(self, actor: Any, user: Any, base_url: str) -> None:
        from django.urls import reverse

        created = user_services.invite_create(actor=actor, user=user)
        link = base_url.rstrip("/") + reverse("invite_accept", args=[created.secret])
        self.stdout.write(
            f"Set-password link for {user.username} (works once, until {created.invite.expires_at:%Y-%m-%d %H:%M} UTC):\n{link}"
        )

    def do_set_role(self, actor: Any, options: dict[str, Any]) -> None:
        user = user_services.user_set_role(
            actor=actor, user=self._user(options["username"]), role=options["role"]
        )
        self.stdout.write(f"{user.username} is now {user_services.role_of(user)}.")

    def do_deactivate(self, actor: Any, options: dict[str, Any]) -> None:
        user = user_services.user_set_active(actor=actor, user=self._user(options["username"]), active=False)
        self.stdout.write(f"{user.username} is deactivated.")

    def do_activate(self, actor: Any, options: dict[str, Any]) -> None:
        user = user_services.user_set_active(actor=actor, user=self._user(options["username"]), active=True)
        self.stdout.write(f"{user.username} is active.")
