"""Fixtures the data-engine tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from interleave_thinker.testing.doubles import scripted_models
from interleave_thinker.testing.doubles.server import LocalServer
from tests.helpers.datagen import Teachers


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[Teachers, LocalServer, scripted_models.State]]:
    """The teachers' chat server and a scripted edit server, once per module."""
    teachers = Teachers()
    state = scripted_models.State()
    edit = LocalServer(scripted_models.handler("edit", state)).start()
    yield teachers, edit, state
    teachers.server.close()
    edit.close()
