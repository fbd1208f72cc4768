from django.core.management.base import BaseCommand

from rules.demo import DEMO_HTTP_PORT, demo_load


class Command(BaseCommand):
    help = "Register the demo MCP servers (idempotent: run it as often as you like)."

    def add_arguments(self, parser):
        parser.add_argument("--http-port", type=int, default=DEMO_HTTP_PORT)

    def handle(self, *args, **options):
        for mcp_id, created in demo_load(http_port=options["http_port"]):
            self.stdout.write(f"{'added' if created else 'kept'} MCP server {mcp_id}")
