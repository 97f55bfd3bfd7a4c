"""Every wrapper family keeps a served backend's members: ``cooperative``, ``set_concurrency``, ``capacity``.

The batch runtime reads them off whatever it is given; a wrapper that dropped one (the meters of
`data generate` did) ran served calls on threads, left the transport at 8 slots and hid a pool file's
``slots=``. Each family here wraps a real served backend talking to a scripted server on 127.0.0.1.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from interleave_thinker.backends.protocols import ImageBatchMixin, ImageRequest, ServedBackend
from interleave_thinker.backends.specs import load_image_backend, load_vlm_backend
from interleave_thinker.backends.wrapping import VLMWrapper, Wrapper
from interleave_thinker.datagen.generate_usage import MeteredImage, MeteredVLM, Usage
from interleave_thinker.runtime.limits import BackendStats, LimitedImage, LimitedVLM
from interleave_thinker.testing.doubles.scripted_models import State, handler
from interleave_thinker.testing.doubles.server import LocalServer
from interleave_thinker.testing.recording import RecordingImage
from interleave_thinker.ui.worker import EventSink, ReportingGenerator, ReportingVLM

IMAGE_FAMILIES: dict[str, Callable[[Any], ImageBatchMixin]] = {
    "limited": lambda inner: LimitedImage(inner, BackendStats("generator", 5)),
    "metered": lambda inner: MeteredImage(inner, Usage()),
    "reporting": lambda inner: ReportingGenerator(inner, EventSink(threading.Event())),
    "recording": RecordingImage,
}
VLM_FAMILIES: dict[str, Callable[[Any], VLMWrapper]] = {
    "limited": lambda inner: LimitedVLM(inner, BackendStats("critic", 5)),
    "metered": lambda inner: MeteredVLM(inner, Usage()),
    "reporting": lambda inner: ReportingVLM(inner, EventSink(threading.Event()), None),
}


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, str]]:
    started = {kind: LocalServer(handler(kind[:4], State())).start() for kind in ("chat", "edit", "edit2")}
    yield {kind: server.url for kind, server in started.items()}
    for server in started.values():
        server.close()


def pooled_generator(servers: dict[str, str], tmp_path: Path) -> Any:
    """The ``http:`` generator over a pool file declaring 3 + 1 slots (its capacity is 4)."""
    pool = tmp_path / "pool.txt"
    pool.write_text(f"{servers['edit']} slots=3\n{servers['edit2']} slots=1\n")
    return load_image_backend(f"http:@{pool}")


@pytest.mark.parametrize("family", sorted(IMAGE_FAMILIES))
def test_every_image_wrapper_keeps_the_served_members(
    family: str, servers: dict[str, str], tmp_path: Path
) -> None:
    inner = pooled_generator(servers, tmp_path)
    wrapper = IMAGE_FAMILIES[family](inner)
    assert isinstance(wrapper, Wrapper) and isinstance(wrapper, ServedBackend)
    assert (inner.cooperative, inner.capacity) == (True, 4)
    assert (wrapper.cooperative, wrapper.capacity) == (True, 4)
    wrapper.set_concurrency(2)
    assert inner.concurrency == 2  # reached the transport
    assert wrapper.generate(ImageRequest("a red square", width=24, height=16)).size == (24, 16)
    assert wrapper.name == inner.name
    wrapper.close()
    inner.close()  # the page's reporters leave the shared backend open


@pytest.mark.parametrize("family", sorted(VLM_FAMILIES))
def test_every_chat_wrapper_keeps_the_served_members(family: str, servers: dict[str, str]) -> None:
    inner = load_vlm_backend(f"openai:{servers['chat']}/v1#scripted")
    wrapper = VLM_FAMILIES[family](inner)
    assert isinstance(wrapper, ServedBackend)
    assert (wrapper.cooperative, wrapper.capacity) == (True, None)
    wrapper.set_concurrency(13)
    assert inner.concurrency == 13  # type: ignore[attr-defined]
    reply = wrapper.chat([{"role": "user", "content": 'User request: "a cat"\n'}])
    assert "execution_plan" in reply
    wrapper.close()
    inner.close()  # type: ignore[attr-defined]


def test_a_limit_reaches_the_transport_through_a_meter(servers: dict[str, str], tmp_path: Path) -> None:
    """`data generate`'s order: the scheduler's limiter over the meter over the served backend. The
    limiter sees the pool's capacity and the served backend's event-loop calls, and sets its slots."""
    inner = pooled_generator(servers, tmp_path)
    metered = MeteredImage(inner, Usage())
    assert metered.capacity == 4
    limited = LimitedImage(metered, BackendStats("generator", 3))
    assert limited._cooperative is True  # served calls run in the request's greenlet, not on threads
    assert inner.concurrency == 3
    limited.close()


def test_two_limiters_over_one_transport_add_up(servers: dict[str, str]) -> None:
    """Planner and critic metered apart over one loaded backend: its transport takes both limits."""
    inner = load_vlm_backend(f"openai:{servers['chat']}/v1#scripted")
    planner = LimitedVLM(MeteredVLM(inner, Usage()), BackendStats("planner", 32))
    critic = LimitedVLM(MeteredVLM(inner, Usage()), BackendStats("critic", 8))
    assert inner.concurrency == 40  # type: ignore[attr-defined]
    critic.close()  # closes the shared backend too, after giving the transport back
    assert inner.concurrency == 32  # type: ignore[attr-defined]
    planner.close()
