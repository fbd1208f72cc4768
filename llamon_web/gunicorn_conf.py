"""gunicorn settings for the web process (docs/deploy.md): ``gunicorn -c python:llamon_web.gunicorn_conf``.

Threaded sync workers (gthread): the views are blocking Django code that mostly waits on the
database, so a few threads per process keep the CPU busy while one request waits, and a process
per core uses every core. Every value can be overridden on the command line or with
GUNICORN_CMD_ARGS; the environment variables below are the ones docs/deploy.md names.
"""

from __future__ import annotations

import os
from pathlib import Path

from dotenv import load_dotenv

# gunicorn serves production only: LLAMON_ENV is prod unless set, and dev (DEBUG on, a generated
# secret, loopback MCP servers) is refused, also when it comes from a .env copied from .env.example.
load_dotenv(Path(__file__).resolve().parent.parent / ".env", override=False)
os.environ.setdefault("LLAMON_ENV", "prod")
if os.environ["LLAMON_ENV"].strip() != "prod":
    raise SystemExit(
        f"gunicorn serves production: LLAMON_ENV must be prod, got {os.environ['LLAMON_ENV']!r} "
        "(development runs with make run)"
    )

wsgi_app = "llamon_web.wsgi:application"
bind = os.environ.get("LLAMON_BIND", "127.0.0.1:8000")
# Processes: WEB_CONCURRENCY, default 2 per core (benchmarks/bench_serving.py: 2 x 4 threads
# on 2 cores). Threads per process: LLAMON_WEB_THREADS.
workers = int(os.environ.get("WEB_CONCURRENCY") or 2 * (os.cpu_count() or 1))
threads = int(os.environ.get("LLAMON_WEB_THREADS") or 4)
worker_class = "gthread"
timeout = 60  # a request that takes longer is a bug (runs execute on Celery workers, not here)
graceful_timeout = 30
keepalive = 5
# A worker is replaced after this many requests (with jitter so they do not all restart at once):
# bounds the memory of a long-lived process.
max_requests = 2000
max_requests_jitter = 200
# Headers from the TLS proxy in front: only trust it when it is on this machine, or list its
# address in FORWARDED_ALLOW_IPS.
forwarded_allow_ips = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1")
accesslog = "-"
errorlog = "-"
loglevel = os.environ.get("LOG_LEVEL", "info").lower()
