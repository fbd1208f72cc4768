from django.core.management.base import BaseCommand

from llamon_web.demo import DEMO_HTTP_PORT, demo_load


class Command(BaseCommand):
    help = "Register the demo: MCP servers, the seed rule set with its cases, an agent and its first runs (idempotent)."

    def add_arguments(self, parser):
        parser.add_argument("--http-port", type=int, default=DEMO_HTTP_PORT)
        parser.add_argument(
            "--no-refresh", action="store_true", help="do not start the stdio servers to list their tools"
        )
        parser.add_argument("--no-runs", action="store_true", help="do not queue the demo runs")

    def handle(self, *args, **options):
        for line in demo_load(
            http_port=options["http_port"],
            refresh_tools=not options["no_refresh"],
            runs=not options["no_runs"],
        ):
            self.stdout.write(line)
