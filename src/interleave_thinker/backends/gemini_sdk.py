"""What the two Gemini backends (``gemini:`` chat and ``gemini-image:``) share: the key variables, the
install hint, the SDK client and :class:`GeminiSDKBackend`, the base that sets them up.

Why here: the ``google-genai`` SDK is an optional extra, imported only when a client is made, after the
key has been checked, so a missing key is named before a missing package; both backends build the
client the same way (the timeout of ``remote.timeout`` in the SDK's milliseconds).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from interleave_thinker.backends.remote import RetrySettings
from interleave_thinker.backends.remote_backend import RemoteBackend, key_envs
from interleave_thinker.backends.wrapping import close_backend
from interleave_thinker.core.errors import BackendError

DEFAULT_KEY_ENVS = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
"""Read in order when ``remote.api_key_env`` is not set (the SDK reads both too)."""
INSTALL_HINT = "pip install 'interleave-thinker[gemini]'"


def gemini_client(name: str, key: str | None, timeout: float) -> Any:
    """A real ``google.genai.Client`` for the backend ``name``; :class:`BackendError` with the install
    hint when the SDK is not installed."""
    try:
        genai = importlib.import_module("google.genai")
    except ImportError as exc:
        raise BackendError(
            f"{name}: the Gemini backend needs the google-genai SDK; install it with {INSTALL_HINT}."
        ) from exc
    return genai.Client(api_key=key, http_options={"timeout": int(timeout * 1000)})


class GeminiSDKBackend(RemoteBackend):
    """A backend whose calls go through the SDK's client: one pseudo-endpoint (its ``name``), the key
    from :data:`DEFAULT_KEY_ENVS` or ``remote.api_key_env``, the client made only after the key is read."""

    model: str
    retry: RetrySettings
    client: Any
    cooperative = False  # the SDK's own client blocks: a batch runs its calls in an executor

    def open_client(
        self, client: Any | None, api_key_env: str | None, concurrency: int, sleep: Callable[[float], None]
    ) -> None:
        """The key's variables, the client (``client`` when given, else a real one) and the caller;
        ``name`` and ``retry`` are set first."""
        self.key_envs, configured = key_envs(api_key_env, DEFAULT_KEY_ENVS)
        self._owns_client = client is None
        self.client = client if client is not None else self._make_client(configured)
        self.open_caller([self.name], retry=self.retry, concurrency=concurrency, sleep=sleep)

    def close(self) -> None:
        """Close the SDK client when we created it (an injected client belongs to the caller)."""
        super().close()
        if self._owns_client:
            close_backend(self.client)

    def _make_client(self, configured: bool) -> Any:
        """Read the key (a missing one is a :class:`ConfigError`), then import the SDK (only now: it is
        an optional extra) and build a ``genai.Client``."""
        key = self.api_key(required=True, configured=configured)
        return gemini_client(self.name, key, self.retry.timeout)
