"""llamon-web settings: one file, every value from the environment (listed in .env.example).

Environments differ only in their variables. ``LLAMON_ENV=dev`` (what ``make run`` uses) turns
on DEBUG, generates a secret once into ``var/`` and allows loopback MCP servers; ``prod`` (the
default, so nothing insecure happens by accident) requires ``SECRET_KEY``.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from dotenv import load_dotenv

from llamon_web.config import (
    ConfigError,
    database_config,
    dev_secret_key,
    dev_signing_key,
    env_bool,
    env_choice,
    env_ed25519_seed,
    env_int,
    env_list,
    env_names,
    env_str,
    redis_url,
)

BASE_DIR = Path(__file__).resolve().parent.parent
# A local .env is a convenience for development; real environment variables win.
load_dotenv(BASE_DIR / ".env", override=False)
# The top-level templates/ and static/ of a checkout. A wheel carries them inside llamon_web/
# (pyproject.toml maps them there), where the app directories loader and finder read them; there
# BASE_DIR is site-packages, which has no such folders of ours.
PROJECT_DIRS = {
    name: [BASE_DIR / name] if (BASE_DIR / "manage.py").is_file() else [] for name in ("templates", "static")
}

LLAMON_ENV = env_choice("LLAMON_ENV", "prod", ("dev", "prod"))
DEV = LLAMON_ENV == "dev"
VAR_DIR = Path(env_str("LLAMON_VAR_DIR") or BASE_DIR / "var").resolve()

if DEV:
    SECRET_KEY = env_str("SECRET_KEY") or dev_secret_key(VAR_DIR / "secret_key")
else:
    SECRET_KEY = env_str("SECRET_KEY")
    if not SECRET_KEY:
        raise ConfigError(
            "SECRET_KEY is required when LLAMON_ENV=prod (set it, or use LLAMON_ENV=dev for development)"
        )
    if len(SECRET_KEY) < 50:
        raise ConfigError("SECRET_KEY must be at least 50 characters in production")

DEBUG = env_bool("DEBUG", DEV)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"] if DEV else [])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
# MCP servers on loopback or private addresses: allowed in development only, unless set.
LLAMON_ALLOW_PRIVATE_MCP = env_bool("LLAMON_ALLOW_PRIVATE_MCP", DEV)
# Change requests: e-mail the approvers who can review one (off by default; Django's mail settings).
LLAMON_APPROVAL_MAIL = env_bool("LLAMON_APPROVAL_MAIL", False)
EMAIL_HOST = env_str("EMAIL_HOST", "localhost") or "localhost"
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "") or ""
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "") or ""
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "llamon@localhost") or "llamon@localhost"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    "axes",  # login throttling
    "ninja",  # serves the API docs' Swagger UI from the package (no CDN)
    "core",
    "accounts",
    "llamon_web",
    "servers",
    "rules",
    "agents",
    "governance",
]

MIDDLEWARE = [
    "llamon_web.middleware.DatabaseUnavailableMiddleware",  # first: it answers 503 for every layer below
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",  # the language from the browser (Accept-Language)
    "django.middleware.common.CommonMiddleware",
    "llamon_web.middleware.RefuseNulMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "llamon_web.middleware.UserLanguageMiddleware",  # ... unless the user chose one
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "llamon_web.middleware.HtmxMessagesMiddleware",
    "csp.middleware.CSPMiddleware",
    "axes.middleware.AxesMiddleware",  # last, as django-axes asks
]

ROOT_URLCONF = "llamon_web.urls"
WSGI_APPLICATION = "llamon_web.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # The project-wide pages (base layout, home, 403, shared partials) in the top-level templates/;
        # every app's own pages in its templates/<app>/.
        "DIRS": PROJECT_DIRS["templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.i18n",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "accounts.roles.roles_context",
                "agents.context.change_inbox_context",
            ],
        },
    }
]

DATABASES = {"default": database_config(env_str("DATABASE_URL"), sqlite_default=VAR_DIR / "llamon.sqlite3")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
# --- Login throttling (django-axes): after LLAMON_LOGIN_FAILURE_LIMIT failed logins for one username
# from one address, that pair is refused (429, accounts/templates/registration/locked_out.html) for the cool-off.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("LLAMON_LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("LLAMON_LOGIN_COOLOFF_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_VERBOSE = False
# The login throttle keys on the client's address as the trusted proxies report it (accounts.client_ip):
# FORWARDED_ALLOW_IPS is the setting gunicorn reads for the same proxies (docs/deploy.md).
LLAMON_TRUSTED_PROXIES = [
    a.strip() for a in (env_str("FORWARDED_ALLOW_IPS", "127.0.0.1") or "").split(",") if a.strip()
]
AXES_CLIENT_IP_CALLABLE = "accounts.client_ip.client_ip"

# --- Content-Security-Policy (django-csp): scripts, styles, images and requests from this site only.
# Templates use no inline scripts, handlers or style attributes; htmx runs without eval and without
# its injected indicator style (base.html's htmx-config). SVG graphs are inline markup, not images.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    },
}

LOGIN_URL = "login"
# How long a one-time "set your password" invitation link works (users page, manage.py users invite).
LLAMON_INVITE_HOURS = env_int("LLAMON_INVITE_HOURS", 72, minimum=1)
# /healthz fails when the data folder (VAR_DIR) has less free space than this.
LLAMON_MIN_FREE_MB = env_int("LLAMON_MIN_FREE_MB", 200, minimum=0)
# API tokens: the lifetime a new one gets unless its maker picks a shorter one, and the longest
# they may pick (days; 0 = tokens never expire and no limit).
LLAMON_API_TOKEN_DAYS = env_int("LLAMON_API_TOKEN_DAYS", 90, minimum=0)
LLAMON_API_TOKEN_MAX_DAYS = env_int("LLAMON_API_TOKEN_MAX_DAYS", 365, minimum=0)
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en"
# The interface speaks these; each user may choose one (user menu), else the browser's
# Accept-Language decides. locale/ko holds the Korean catalogue (tests/test_i18n.py keeps it complete).
LANGUAGES = [("en", "English"), ("ko", "한국어")]
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
# The project-wide CSS and JS in the top-level static/; an app's own files in its static/<app>/.
STATICFILES_DIRS = PROJECT_DIRS["static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # whitenoise warns about a missing folder
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}

# --- Celery: Redis when REDIS_URL is set, else the embedded filesystem broker under var/
# (kombu's filesystem transport with atomic writes, llamon_web/broker.py).
REDIS_URL = redis_url("REDIS_URL")
# Seconds a connect or a command to Redis may take; a publish tries 3 times, then the run is refused (503).
LLAMON_BROKER_TIMEOUT_S = env_int("LLAMON_BROKER_TIMEOUT_S", 3, minimum=1)
CELERY_TASK_PUBLISH_RETRY_POLICY = {
    "max_retries": 2,
    "interval_start": 0,
    "interval_step": 0.5,
    "interval_max": 1,
}
BROKER_DIR = VAR_DIR / "broker"
LLAMON_REDIS_TRANSPORT_OPTIONS = {
    "visibility_timeout": env_int("CELERY_VISIBILITY_TIMEOUT", 3600),
    # A Redis that is down or silent fails a publish within seconds instead of hanging it.
    "socket_connect_timeout": LLAMON_BROKER_TIMEOUT_S,
    "socket_timeout": LLAMON_BROKER_TIMEOUT_S,
}
if REDIS_URL:
    CELERY_BROKER_URL = REDIS_URL
    CELERY_BROKER_TRANSPORT_OPTIONS = LLAMON_REDIS_TRANSPORT_OPTIONS
else:
    for _folder in ("queue", "processed", "control"):
        (BROKER_DIR / _folder).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_URL = "atomicfs://"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        # in and out must be the same folder. Polling every 0.02 s: a run is claimed ~8 ms after it is
        # enqueued (0.1 s: ~42 ms), for ~1.1 % of a core while idle (0.1 s: ~0.3 %); docs/performance.md.
        "data_folder_in": str(BROKER_DIR / "queue"),
        "data_folder_out": str(BROKER_DIR / "queue"),
        "processed_folder": str(BROKER_DIR / "processed"),
        "control_folder": str(BROKER_DIR / "control"),  # kombu's default is ./control
        "store_processed": False,
        "polling_interval": 0.02,
    }
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
CELERY_WORKER_HEARTBEAT_S = env_int("LLAMON_WORKER_HEARTBEAT_S", 15, minimum=1)

# --- Cache: per-process memory is enough (sessions live in the database).
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# --- Security headers; `manage.py check --deploy` is clean with prod settings behind TLS.
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # htmx reads the token from the page, not the cookie
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
if not DEV:
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    # A load balancer's health check speaks plain http to each machine and expects 200, not 301.
    SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
    if not SECURE_HSTS_PRELOAD:
        # Preloading is opt-in: with the header anyone may submit the domain to the browsers'
        # preload lists, which is hard to undo. Leaving it off is a choice, not an oversight.
        SILENCED_SYSTEM_CHECKS = ["security.W021"]
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        "llamon_agent": {"level": "INFO"},
        "httpx": {"level": "WARNING"},
        "mcp": {"level": "WARNING"},
    },
}

# --- LLM (used by agents; see llamon_agent.settings.Settings for the engine's own reading).
LLAMON_LLM_PROVIDER = env_choice(
    "LLAMON_LLM_PROVIDER", "offline", ("offline", "scripted", "openai-compatible")
)
LLAMON_LLM_BASE_URL = env_str("LLAMON_LLM_BASE_URL")
LLAMON_LLM_MODEL = env_str("LLAMON_LLM_MODEL", "gpt-4o-mini")
LLAMON_LLM_API_KEY_ENV = env_str("LLAMON_LLM_API_KEY_ENV", "OPENAI_API_KEY")
# Which variables an agent's "API key variable" may name (exact names or PREFIX*): its value is
# sent to the model endpoint, so an editor must not be able to name SECRET_KEY or DATABASE_URL.
# The app's own settings are never allowed, whatever this says (llamon_agent.envnames).
LLAMON_LLM_KEY_ENVS = env_names("LLAMON_LLM_KEY_ENVS", ["OPENAI_API_KEY", "LLAMON_LLM_KEY_*"])
# Which variables an MCP server's env names and header names may read (passed to the stdio
# child or sent as a header).
LLAMON_MCP_ENV_NAMES = env_names("LLAMON_MCP_ENV_NAMES", ["LLAMON_MCP_*"])

# --- MCP: which stdio executables may be spawned (None = any; tests restrict it).
LLAMON_STDIO_ALLOWED_DIRS: list[Path] | None = None
# --- MCP: the resolver the URL guard uses, a dotted path (None = the system's getaddrinfo).
# Tests name a fake one so that no test ever sends a DNS query (servers.urlguard.configured_resolver).
LLAMON_URL_RESOLVER: str | None = None
# --- MCP: how many tools, and how many bytes of them (names, descriptions, schemas), a server may list.
# A refresh past either is refused with the reason, and the tools stored before are kept.
LLAMON_MCP_MAX_TOOLS = env_int("LLAMON_MCP_MAX_TOOLS", 1000, minimum=1)
LLAMON_MCP_MAX_TOOLS_BYTES = env_int("LLAMON_MCP_MAX_TOOLS_BYTES", 2 * 1024 * 1024, minimum=1024)
# A tool result over this many bytes of text is cut as it arrives, with a marker and its full size:
# stored, handed to the model and shown cut (llamon_agent.mcp.results.cap_result; the same variable
# sets the SDK's own pool in a served agent).
LLAMON_TOOL_RESULT_MAX_BYTES = env_int("LLAMON_TOOL_RESULT_MAX_BYTES", 256 * 1024, minimum=1024)
# What one run may store of its steps' inputs and outputs, in bytes of JSON (agents.sink): past it,
# each further value over 1 KB is stored as a marker with its size and its SHA-256, so a run of 200
# rules returning 256 KB each stays a few MB and its evidence still commits to what was returned.
LLAMON_RUN_MAX_BYTES = env_int("LLAMON_RUN_MAX_BYTES", 4 * 1024 * 1024, minimum=64 * 1024)
# Signs the evidence chain's head and every export (docs/evidence.md): keep the key where the
# database's owners cannot read it, and give the public key (manage.py chain_head --public-key) to
# whoever checks exports. Required in production (the deploy check core.W001 says when it is
# missing); in development it is generated once into var/chain_signing_key (mode 0600).
LLAMON_CHAIN_SIGNING_KEY = env_ed25519_seed("LLAMON_CHAIN_SIGNING_KEY")
if DEV and LLAMON_CHAIN_SIGNING_KEY is None:
    LLAMON_CHAIN_SIGNING_KEY = dev_signing_key(VAR_DIR / "chain_signing_key")
# --- Traces: what a model's tokens cost, USD per million tokens, as JSON (docs/observability.md):
# {"gpt-4o-mini": {"input": 0.15, "output": 0.6}}. A model not listed has an unknown cost.
# Checked at start-up by the system check agents.E001 (agents.pricing).
LLAMON_MODEL_PRICES = env_str("LLAMON_MODEL_PRICES", "") or ""

CELERY_BEAT_SCHEDULE = {
    "worker-ping": {"task": "agents.tasks.worker_ping", "schedule": float(CELERY_WORKER_HEARTBEAT_S)},
}

# --- Runs: soft limit < hard limit < broker visibility timeout; heartbeat and reaper periods.
LLAMON_RUN_SOFT_LIMIT_S = env_int("LLAMON_RUN_SOFT_LIMIT_S", 300, minimum=1)
LLAMON_RUN_HARD_LIMIT_S = env_int("LLAMON_RUN_HARD_LIMIT_S", 330, minimum=2)
LLAMON_RUN_HEARTBEAT_S = env_int("LLAMON_RUN_HEARTBEAT_S", 5, minimum=1)
LLAMON_RUN_STALE_AFTER_S = env_int("LLAMON_RUN_STALE_AFTER_S", 30, minimum=2)
LLAMON_REAPER_PERIOD_S = env_int("LLAMON_REAPER_PERIOD_S", 10, minimum=1)
LLAMON_SERVED_STALE_AFTER_S = env_int("LLAMON_SERVED_STALE_AFTER_S", 600, minimum=10)
if LLAMON_RUN_SOFT_LIMIT_S >= LLAMON_RUN_HARD_LIMIT_S:
    raise ConfigError("LLAMON_RUN_SOFT_LIMIT_S must be smaller than LLAMON_RUN_HARD_LIMIT_S")
if REDIS_URL and CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"] <= LLAMON_RUN_HARD_LIMIT_S:
    raise ConfigError("LLAMON_RUN_HARD_LIMIT_S must be smaller than CELERY_VISIBILITY_TIMEOUT")
if LLAMON_RUN_STALE_AFTER_S <= 2 * LLAMON_RUN_HEARTBEAT_S:
    raise ConfigError("LLAMON_RUN_STALE_AFTER_S must be more than twice LLAMON_RUN_HEARTBEAT_S")
# --- Delivery: a queued run whose task message was lost is sent again, then failed (docs/reliability.md).
LLAMON_RUN_CLAIM_GRACE_S = env_int("LLAMON_RUN_CLAIM_GRACE_S", 15, minimum=1)
LLAMON_RUN_DELIVERY_ATTEMPTS = env_int("LLAMON_RUN_DELIVERY_ATTEMPTS", 3, minimum=0)
CELERY_BEAT_SCHEDULE["runs-reap"] = {
    "task": "agents.tasks.runs_reap_task",
    "schedule": float(LLAMON_REAPER_PERIOD_S),
}
CELERY_BEAT_SCHEDULE["runs-expire"] = {"task": "agents.tasks.runs_expire_task", "schedule": 3600.0}
# --- Tool drift: how often the beat lists every enabled MCP server's tools again (seconds; 0 = never).
# A changed list is stored and audited, and rules.checks flags the rules it breaks (docs/rulesets.md).
LLAMON_TOOLS_CHECK_S = env_int("LLAMON_TOOLS_CHECK_S", 3600, minimum=0)
if 0 < LLAMON_TOOLS_CHECK_S < 60:
    raise ConfigError("LLAMON_TOOLS_CHECK_S must be 0 (off) or at least 60 seconds")
if LLAMON_TOOLS_CHECK_S:
    CELERY_BEAT_SCHEDULE["mcp-tools-check"] = {
        "task": "servers.tasks.tools_check_task",
        "schedule": float(LLAMON_TOOLS_CHECK_S),
    }
