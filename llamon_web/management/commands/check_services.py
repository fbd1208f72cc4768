import sys

from django.core.management.base import BaseCommand

from llamon_web.health import service_checks


class Command(BaseCommand):
    help = "Check the database and the broker; one line per problem, exit status 2 when any fails."

    def handle(self, *args, **options):
        failed = [c for c in service_checks() if not c.ok]
        for check in failed:
            self.stderr.write(f"configuration error: {check.detail}")
        if failed:
            sys.exit(2)
        self.stdout.write("database and broker: ok")
