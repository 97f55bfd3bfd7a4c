"""Fixtures the runtime's batch tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers.batch import scripted_servers


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, str]]:
    """The scripted chat and edit model servers, once per module."""
    with scripted_servers() as urls:
        yield urls
