"""What a trace records as each role's backend: the one that ran, not the one the config names.

Why not the config's specs: ``Pipeline(planner=..., critic=..., generator=..., config=cfg)`` runs the
objects it was given, whatever ``cfg`` says. A backend loaded from a spec carries that spec (``spec``,
set by ``backends.specs``; ``tiny:planner-sft`` rather than the folder it resolves to); any other
object is described by its ``name`` (the protocol's attribute), else its class. Wrappers that keep
the wrapped backend as ``inner`` (limiters, meters, the demo's reporters) are looked through.
"""

from __future__ import annotations

from interleave_thinker.runtime.failures import one_line

MAX_DESCRIPTION = 300
MAX_WRAPPERS = 16


def backend_description(backend: object) -> str:
    """``spec`` of the backend (or of the backend it wraps), else its ``name``, else its class name."""
    current = backend
    for _ in range(MAX_WRAPPERS):
        spec = getattr(current, "spec", None)
        if isinstance(spec, str) and spec:
            return one_line(spec, MAX_DESCRIPTION)
        inner = getattr(current, "inner", None)
        if inner is None or inner is current:
            break
        current = inner
    name = getattr(current, "name", None)
    if isinstance(name, str) and name:
        return one_line(name, MAX_DESCRIPTION)
    return type(current).__name__
