"""The syntax of a backend spec, ``KIND:TARGET``: the one rule the settings (``core/config.py``) and the
backend registry (``backends/specs.parse_spec``, which adds the known kinds and empty targets) both apply."""

from __future__ import annotations


def split_spec(spec: str, example: str = "transformers:ID") -> tuple[str, str]:
    """``(kind, target)`` of ``spec``; :class:`ValueError` saying what is wrong and how to write it when
    it has no kind (the caller adds which flag, key or spec it was, as its errors do).

    >>> split_spec("http:http://127.0.0.1:8011")
    ('http', 'http://127.0.0.1:8011')
    """
    kind, sep, target = spec.partition(":")
    if not sep or not kind:
        raise ValueError(f"no backend kind; write KIND:TARGET, e.g. {example!r}")
    return kind, target
