"""The base every served backend stands on: its :class:`RemoteCaller`, the API-key lookup, the status
and SDK-error translation, ``close`` and the context manager.

Why one base: five backends had grown five key lookups (a missing key exited 2 with three and 1 with
two), five status classifications (501 was retried by some and not others) and two SDK translations.
A backend now only builds its request and reads its reply; everything that decides whether to retry,
what a missing key means, and what an error says about secrets lives here and in ``remote.py``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import httpx

from interleave_thinker.backends.protocols import Closeable, ServedBackend
from interleave_thinker.backends.remote import (
    EndpointPool,
    RemoteCaller,
    RetryableError,
    RetrySettings,
    error_message,
    is_retryable_status,
)
from interleave_thinker.core import green
from interleave_thinker.core.errors import BackendError, ConfigError
from interleave_thinker.core.redact import redact_credentials

if TYPE_CHECKING:
    from interleave_thinker.core.config import RemoteOptions

_TRANSPORT_ERRORS = (httpx.TransportError, TimeoutError, ConnectionError)


def key_envs(configured: str | None, defaults: Sequence[str]) -> tuple[tuple[str, ...], bool]:
    """The variables to read the key from, and whether a key is then required: a variable named in
    ``remote.api_key_env`` must hold one; the service's usual variables are read in order."""
    return ((configured,), True) if configured else (tuple(defaults), False)


def read_api_key(who: str, envs: Sequence[str], *, required: bool, configured: bool = False) -> str | None:
    """The first non-empty value among ``envs``; :class:`ConfigError` (exit 2) naming the variables
    when none holds one and a key is ``required``. The value is never put in a message."""
    for env in envs:
        value = os.environ.get(env, "").strip()
        if value:
            return value
    if not required:
        return None
    if configured:
        raise ConfigError(
            f"{who}: remote.api_key_env names {envs[0]}, but that environment variable is empty; "
            f"set {envs[0]} (export {envs[0]}=<key>) or unset remote.api_key_env."
        )
    raise ConfigError(
        f"{who}: no API key: set {' or '.join(envs)} in the environment (export {envs[0]}=<key>), "
        "or name the variable that holds it in remote.api_key_env."
    )


def caller_settings(remote: RemoteOptions) -> dict[str, Any]:
    """The constructor keywords of a served backend that reads its own key (``openai:``, ``gemini:``)
    from the user's ``remote`` section: retries, concurrency and the key's variable."""
    return {
        "retry": RetrySettings.from_options(remote),
        "concurrency": remote.concurrency,
        "api_key_env": remote.api_key_env,
    }


def pool_settings(remote: RemoteOptions, who: str, default_env: str) -> dict[str, Any]:
    """The constructor keywords of a bearer-token pool backend (``http:``, ``vllm-omni:``) from the
    user's ``remote`` section: retries, concurrency, cooldown, the key (optional unless named in
    ``remote.api_key_env``) and the variable it came from."""
    envs, required = key_envs(remote.api_key_env, (default_env,))
    return {
        "retry": RetrySettings.from_options(remote),
        "concurrency": remote.concurrency,
        "cooldown": remote.cooldown,
        "api_key": read_api_key(who, envs, required=required, configured=required),
        "key_env": envs[0],
    }


def sdk_status(exc: BaseException) -> int | None:
    """The HTTP status an SDK error carries in an integer ``code`` (``google.genai.errors.APIError``)."""
    code = getattr(exc, "code", None)
    return code if isinstance(code, int) and not isinstance(code, bool) else None


class RemoteBackend(Closeable, ServedBackend):
    """Subclasses call :meth:`open_caller` in their constructor, then send requests through
    ``self.caller.call``, classifying replies with ``self.caller.check_status`` (HTTP) or
    :meth:`sdk_error` (SDKs), and may override :meth:`status_hint` to say the fix for a status."""

    name: str
    caller: RemoteCaller
    pool: EndpointPool
    key_envs: tuple[str, ...] = ()
    key_hint: str = (
        "Check that {b.key_envs[0]} holds a key this server accepts "
        "(or name another variable in remote.api_key_env)"
    )
    not_found_hint: str = ""
    concurrency: int = 8
    cooperative: bool = True
    """Whether every blocking point of a call goes through the caller (HTTP through its client, sleeps
    through its ``sleep``), so that a batch request may run it on the event loop; a backend whose SDK
    blocks on its own says False and the batch runs its calls in a small executor."""

    def open_caller(
        self,
        urls: Sequence[str],
        *,
        retry: RetrySettings | None = None,
        concurrency: int = 8,
        cooldown: float = 30.0,
        headers: dict[str, str] | None = None,
        sleep: Callable[[float], None] = green.sleep,
        slots: Mapping[str, int] | None = None,
    ) -> RemoteCaller:
        """The pool and the caller; every error it raises is scrubbed of the values of ``key_envs``.
        ``slots`` (per endpoint) cap each endpoint, and their sum the whole pool. The backend's ``name``
        (shown in every error and, failing a spec, recorded) loses the credentials of its URLs here."""
        self.name = redact_credentials(self.name)
        self.pool = EndpointPool(list(urls), cooldown=cooldown, slots=slots)
        self.caller = RemoteCaller(
            self.name,
            self.pool,
            retry=retry,
            concurrency=concurrency,
            headers=headers,
            sleep=sleep,
            secrets=lambda: [os.environ.get(env) for env in self.key_envs],  # read, never kept
        )
        return self.caller

    def set_concurrency(self, concurrency: int) -> None:
        """Allow ``concurrency`` calls in flight, in the transport and in batched calls alike: the
        batch scheduler passes its per-backend limit here, so one number holds end to end."""
        self.caller.resize(concurrency)
        self.concurrency = self.caller.concurrency  # at most the pool's declared slots

    @property
    def capacity(self) -> int | None:
        """The calls the pool's declared ``slots=`` allow at once (None: no per-endpoint slots)."""
        return self.pool.capacity

    def api_key(self, *, required: bool, configured: bool = False) -> str | None:
        """The key from ``key_envs`` (see :func:`read_api_key`)."""
        return read_api_key(self.name, self.key_envs, required=required, configured=configured)

    def check_reply(self, response: httpx.Response, detail: str | None = None) -> None:
        """Classify an HTTP reply through the caller's one status rule; ``detail`` is the server's
        message as this backend's dialect reads it (default: :func:`error_message`), scrubbed and cut
        here."""
        if response.status_code < 400:
            return
        text = (
            self.caller.scrub(error_message(response) if detail is None else detail)[:500] or "(empty body)"
        )
        hint = self.status_hint(response.status_code, text, response.request.url.path)
        self.caller.check_status(response, text, hint=hint)

    def status_hint(self, status: int, detail: str, path: str = "") -> str:
        """The fix to add to a final error of ``status`` at ``path`` (:attr:`key_hint` for 401/403,
        :attr:`not_found_hint` for 404, formatted with ``b`` = this backend); "" when the server's
        message says enough."""
        if status in (401, 403) and self.key_envs:
            return self.key_hint.format(b=self)
        return self.not_found_hint.format(b=self) if status == 404 else ""

    def sdk_error(self, exc: Exception) -> Exception:
        """An SDK exception translated at the boundary, to be raised ``from exc``: retryable codes and
        transport errors ask for another try, other errors end the call with a scrubbed message."""
        code = sdk_status(exc)
        text = self.caller.scrub(str(getattr(exc, "message", None) or exc))[:500]  # scrubbed, then cut
        if code is None:
            if isinstance(exc, _TRANSPORT_ERRORS):
                return RetryableError(f"{type(exc).__name__}: {text}")
            return BackendError(f"{self.name}: {type(exc).__name__}: {text}")
        status = getattr(exc, "status", None)  # the SDK's status name, e.g. "INTERNAL"
        where = f"HTTP {code} {status[:40]}" if isinstance(status, str) and status else f"HTTP {code}"
        if is_retryable_status(code):
            return RetryableError(f"{where}: {text}")
        hint = self.status_hint(code, text)
        message = f"{self.name}: {where}: {text}"
        return BackendError(f"{message.rstrip('.')}. {hint}." if hint else message)

    def close(self) -> None:
        self.caller.close()
