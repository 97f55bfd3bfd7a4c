"""What the two Gemini backends (``gemini:`` chat and ``gemini-image:``) share: the key variables, the
install hint and the SDK client.

Why here: the ``google-genai`` SDK is an optional extra, imported only when a client is made, after the
key has been checked, so a missing key is named before a missing package; both backends build the
client the same way (the timeout of ``remote.timeout`` in the SDK's milliseconds).
"""

from __future__ import annotations

import importlib
from typing import Any

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
