"""The benchmark registry: every :class:`~interleave_thinker.eval.benchmark.Benchmark`, one line each.

Adding a benchmark is a folder beside these (``protocol.py``: its reader, layout, protocols, published
numbers, help texts; ``data.py``, ``prompts.py``, ``scorer.py``) whose ``__init__`` exports its
``BENCHMARK``, and one line in :data:`BENCHMARKS`; the CLI's choices and help, the scorer, the layout
writer and the report follow.
"""

from __future__ import annotations

from interleave_thinker.core.errors import ConfigError, InputError
from interleave_thinker.eval.benchmark import Benchmark, Protocol
from interleave_thinker.eval.benchmarks import consistency, custom, rise, ueval, wise
from interleave_thinker.eval.datasets import EvalItem
from interleave_thinker.eval.published import Published

BENCHMARKS: tuple[Benchmark, ...] = (
    ueval.BENCHMARK,
    wise.BENCHMARK,
    rise.BENCHMARK,
    custom.BENCHMARK,
    consistency.BENCHMARK,
)


def names() -> tuple[str, ...]:
    return tuple(b.name for b in BENCHMARKS)


def protocols() -> tuple[Protocol, ...]:
    return tuple(p for b in BENCHMARKS for p in b.protocols)


def protocol_names() -> tuple[str, ...]:
    return tuple(p.name for p in protocols())


def get(name: str) -> Benchmark:
    for benchmark in BENCHMARKS:
        if benchmark.name == name:
            return benchmark
    raise InputError(f"Unknown benchmark '{name}'; choose one of: {', '.join(names())}.")


def find_protocol(name: str) -> tuple[Benchmark, Protocol]:
    """The protocol ``name`` and the benchmark it scores."""
    for benchmark in BENCHMARKS:
        for protocol in benchmark.protocols:
            if protocol.name == name:
                return benchmark, protocol
    raise ConfigError(f"Unknown protocol {name!r}; choose one of {', '.join(protocol_names())}.")


def find_protocol_or_none(name: str) -> tuple[Benchmark, Protocol] | None:
    try:
        return find_protocol(name)
    except ConfigError:
        return None


def load_items(name: str, data: str) -> list[EvalItem]:
    """Every item of benchmark ``name`` in ``data`` (a local path or ``hf:ID[:split]``), validated."""
    return get(name).load(data)


def option_help(option: str) -> str:
    """The benchmarks' parts of the CLI option ``option``'s help (:attr:`Benchmark.help`), joined."""
    return "; ".join(b.help[option] for b in BENCHMARKS if option in b.help)


def mode_flag() -> str:
    """The flag that picks a protocol's request shape (:attr:`Protocol.modes`), as the CLI spells it."""
    flags = sorted({p.mode_flag for p in protocols() if p.mode_flag})
    if len(flags) != 1:
        raise ConfigError(f"The protocols name {len(flags)} request-mode flags ({flags}); one is expected.")
    return flags[0]


def published(protocol: str) -> list[Published]:
    """The published numbers measured with ``protocol``."""
    return [p for b in BENCHMARKS for p in b.published if protocol in p.protocols]
