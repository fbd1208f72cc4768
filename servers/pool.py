"""The MCP pool of the web (and worker) process, with this project's guards installed.

* ``stdio_allowed``: with ``settings.LLAMON_STDIO_ALLOWED_DIRS`` set (tests set it to
  ``examples/`` and ``tests/servers/``), a stdio command runs only when the executable lives
  in one of those folders, or, for a Python interpreter, when its first argument is a script
  file that lives there (``python -c ...`` or ``python -m ...`` is refused). ``None`` allows
  any command: only admins can save one.
* ``http_guard``: :func:`servers.urlguard.check_mcp_url_configured`, so a URL is checked again,
  after resolution, each time a session is opened (not only when it was saved).
* ``env_policy``: ``settings.LLAMON_MCP_ENV_NAMES``, checked again each time a session opens,
  so a server saved before the allow-list cannot hand a forbidden variable to its child.

Servers are registered from the database on demand (:func:`pool_for_server`); a changed
spec replaces the old session.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from django.conf import settings
from django.utils.translation import gettext as _

from core.env_policy import mcp_env_policy
from llamon_agent.mcp import McpServerSpec
from llamon_agent.mcp.pool import McpPool, set_pool
from servers.models import McpServer
from servers.selectors import mcp_server_spec
from servers.urlguard import check_mcp_url_configured

_PYTHON_NAME = re.compile(r"^python(\d+(\.\d+)*)?$")
_lock = threading.Lock()
_pool: McpPool | None = None


def stdio_refusal(command: str, args: Sequence[str], allowed_dirs: Sequence[Path | str] | None) -> str | None:
    """Why ``command args`` may not run under the stdio allow-list, or None when it may."""
    if allowed_dirs is None:
        return None
    roots = [Path(d).resolve() for d in allowed_dirs]
    where = ", ".join(str(r) for r in roots) or "(none)"
    executable = _resolve_command(command)
    if executable is None:
        return _("The command %(command)r was not found.") % {"command": command}
    if _is_python(executable):
        script = args[0] if args else ""
        if not script or script.startswith("-"):
            return _(
                "A Python interpreter may only run a script file from the allowed folders: the first "
                "argument must be that script (options such as -c or -m are not allowed). Allowed folders: %(where)s."
            ) % {"where": where}
        path = Path(script).expanduser().resolve()
        if not path.is_file():
            return _("The script %(script)r does not exist.") % {"script": script}
        if not any(path.is_relative_to(root) for root in roots):
            return _("The script %(path)r is outside the folders stdio servers may run from: %(where)s.") % {
                "path": str(path),
                "where": where,
            }
        return None
    if not any(executable.is_relative_to(root) for root in roots):
        return _("The command %(command)r is outside the folders stdio servers may run from: %(where)s.") % {
            "command": str(executable),
            "where": where,
        }
    return None


def stdio_allowed(spec: McpServerSpec) -> bool:
    """The pool's ``stdio_allowed`` hook: the allow-list of ``settings.LLAMON_STDIO_ALLOWED_DIRS``."""
    return stdio_refusal(spec.command or "", spec.args, settings.LLAMON_STDIO_ALLOWED_DIRS) is None


def web_pool() -> McpPool:
    """This process's pool (created on first use, and again after a fork), with both guards."""
    global _pool
    with _lock:
        if _pool is None or _pool.closed:
            _pool = McpPool(
                stdio_allowed=stdio_allowed,
                http_guard=check_mcp_url_configured,
                env_policy=mcp_env_policy(),
                max_result_bytes=settings.LLAMON_TOOL_RESULT_MAX_BYTES,
            )
            # Also the engine's process-wide pool, so nothing in this process opens an unguarded one.
            set_pool(_pool)
        return _pool


def pool_for_server(server: McpServer) -> McpPool:
    """The web pool with ``server`` registered as it is now (a changed spec replaces the session)."""
    pool = web_pool()
    pool.register(mcp_server_spec(server=server))
    return pool


def pool_forget(mcp_id: str) -> None:
    """Close and forget ``mcp_id``'s session (after a delete or a rename)."""
    if _pool is not None and not _pool.closed:
        _pool.unregister(mcp_id)


def web_pool_close() -> None:
    """Close the pool and its sessions (stdio children stopped); the next use opens a new one."""
    global _pool
    with _lock:
        pool, _pool = _pool, None
    if pool is not None:
        set_pool(None)
        pool.close()


def _resolve_command(command: str) -> Path | None:
    # The child is started with this process's PATH and working directory: resolve the same way.
    found = shutil.which(command) if os.sep not in command else command
    if not found:
        return None
    path = Path(found).expanduser()
    return path.resolve() if path.is_file() else None


def _is_python(executable: Path) -> bool:
    if _PYTHON_NAME.match(executable.name):
        return True
    return executable == Path(sys.executable).resolve()


def _forget_in_child() -> None:
    # The parent's pool thread does not exist after a fork; the child opens its own pool.
    global _pool, _lock
    _pool = None
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_in_child)
