import os

from django.core.management.base import BaseCommand

from accounts.services import admin_ensure


class Command(BaseCommand):
    help = "Create the admin user (password from LLAMON_ADMIN_PASSWORD, else generated and printed once)."

    def handle(self, *args, **options):
        user, password = admin_ensure(password=os.environ.get("LLAMON_ADMIN_PASSWORD") or None)
        if password and not os.environ.get("LLAMON_ADMIN_PASSWORD"):
            self.stdout.write(f"Created user {user.get_username()} with password: {password}  (shown once)")
        else:
            self.stdout.write(f"User {user.get_username()} is ready.")
