"""What a trace records as each role's backend: the one that ran, not the one the config names.

Why not the config's specs: ``Pipeline(planner=..., critic=..., generator=..., config=cfg)`` runs the
objects it was given, whatever ``cfg`` says. A backend loaded from a spec carries that spec (``spec``,
set by ``backends.specs``; ``tiny:planner-sft`` rather than the folder it resolves to); any other
object is described by its ``name`` (the protocol's attribute), else its class. Wrappers that keep
the wrapped backend as ``inner`` (limiters, meters, the demo's reporters) are looked through.
"""

from __future__ import annotations

from interleave_thinker.backends.wrapping import backend_name, backend_spec, chain
from interleave_thinker.runtime.failures import one_line

MAX_DESCRIPTION = 300


def backend_description(backend: object) -> str:
    """``spec`` of the backend (or of the backend it wraps), else its ``name``, else its class name."""
    layers = chain(backend)
    spec = next((s for layer in layers if (s := backend_spec(layer)) is not None), None)
    return one_line(spec if spec is not None else backend_name(layers[-1]), MAX_DESCRIPTION)
