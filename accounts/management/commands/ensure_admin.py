import os

from django.core.management.base import BaseCommand

from accounts.services import admin_ensure
from core.errors import PendingApproval


class Command(BaseCommand):
    help = "Create the admin user (password from LLAMON_ADMIN_PASSWORD, else generated and printed once)."

    def handle(self, *args, **options):
        try:
            user, password = admin_ensure(password=os.environ.get("LLAMON_ADMIN_PASSWORD") or None)
        except PendingApproval as exc:  # an account demoted since, while agents are protected
            self.stdout.write(f"{exc} ({exc.url})")
            return
        if password and not os.environ.get("LLAMON_ADMIN_PASSWORD"):
            self.stdout.write(f"Created user {user.get_username()} with password: {password}  (shown once)")
        else:
            self.stdout.write(f"User {user.get_username()} is ready.")
