"""The one exception hierarchy of interleave-thinker.

Every error a user can see derives from :class:`InterleaveThinkerError`; messages say the value at
fault, the constraint it broke and how to fix it. Vendor errors are translated at the backend
boundary with ``raise ... from exc`` so the original traceback is kept.

::

    InterleaveThinkerError
    ├── ConfigError            bad config file, key, preset, flag value or backend spec
    ├── InputError             bad request: missing image file, <image> markers vs images
    │   ├── TraceVersionError  a trace.json of a schema version this code does not read
    │   └── RequestError       a request a service refuses (its HTTP status attached)
    ├── TemplateError          prompt template missing, unreadable or failing its digest
    ├── BackendError           a model or service failed to load or answer
    │   └── ModelNotFoundError a checkpoint path or id that does not exist
    ├── StorageError           a file or folder that cannot be written: disk full, no permission,
    │                          a read-only file system, a file where a folder belongs (core/storage.py)
    ├── ParseError             a model reply that cannot be parsed (raw reply attached)
    ├── PlanningError          the planner never produced a valid plan
    └── RunFailedError         a command's requests ran, but none succeeded or too many fell back
"""

from __future__ import annotations


class InterleaveThinkerError(Exception):
    """Base class of every error raised on purpose by interleave-thinker."""


class ConfigError(InterleaveThinkerError):
    """A configuration value (file, key, preset, flag, backend spec) is invalid."""


class InputError(InterleaveThinkerError):
    """The request itself is invalid (prompt, images, markers)."""


class TraceVersionError(InputError):
    """A ``trace.json`` has a newer or unknown ``schema_version`` (older ones are migrated on read)."""


class RequestError(InputError):
    """A request one of our services (``serve generator``, ``serve vlm``) refuses; ``status`` is the HTTP
    status of the reply, ``headers`` any it must carry. The message may quote the request's text, so it
    is made valid UTF-8 here."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        message = message.encode("utf-8", "replace").decode("utf-8")
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


class TemplateError(InterleaveThinkerError):
    """A prompt template could not be obtained or failed verification."""


class BackendError(InterleaveThinkerError):
    """A backend failed to load or to answer."""


class ModelNotFoundError(BackendError):
    """A checkpoint path or model id does not exist."""


class StorageError(InterleaveThinkerError):
    """A file or folder could not be written (or created): the message names the path and the fix;
    ``exit_code`` is 2 when the path given is wrong (no permission, read-only, a file in the way) and 1
    when the disk is (no space left: free some and run the same command again)."""

    def __init__(self, message: str, *, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class ParseError(InterleaveThinkerError):
    """A model reply could not be turned into a typed result.

    The raw reply is kept in :attr:`raw` so traces can record exactly what the model said.
    """

    def __init__(self, message: str, *, raw: str) -> None:
        super().__init__(message)
        self.raw = raw


class PlanningError(InterleaveThinkerError):
    """The planner did not return a valid plan within its attempts."""

    def __init__(self, message: str, *, raw_replies: list[str]) -> None:
        super().__init__(message)
        self.raw_replies = raw_replies


class RunFailedError(InterleaveThinkerError):
    """A command on the batch scheduler ran, but no request succeeded or more judgements failed than
    ``agents.max_fallback_share`` tolerates; its finished work is kept and the same command continues it."""
