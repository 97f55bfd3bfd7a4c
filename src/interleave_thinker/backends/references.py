"""Reference images on the wire: how many a backend takes, the order they are sent in, and the checks.

Why one module: every image backend sends ``request.image`` first and then ``request.references``, in
the order given, and refuses more than it declares (``max_references``: the images it takes *beside*
the edited one; 0 = none). The loop's ``loop.references`` policy is checked against that declaration
once, when the pipeline is built, so a generator that cannot keep a subject fails at load time with a
one-line error instead of on the first edit of the first request.

The caps (each backend cites its source where it sets its own):

- FLUX.2 [klein]: 4 input images per call (BFL's "Reference Images per Model"), the edited one among
  them, so 3 references; FLUX.2 [dev]: 6 recommended, so 5;
- OpenAI GPT image models: 16 images on ``/images/edits``, so 15; ``dall-e-*``: one image, so 0;
- Gemini 2.5 Flash Image: 3 input images at most for best results, so 2; Gemini 3 image models: 14,
  so 13 (Google Cloud's "Gemini image generation limitations");
- FastVideo's request takes one input image path: 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from interleave_thinker.backends.wrapping import backend_name, reference_cap
from interleave_thinker.core.errors import ConfigError

if TYPE_CHECKING:
    from PIL import Image

    from interleave_thinker.backends.protocols import ImageRequest

WIRE_MAX_REFERENCES = 15
"""The most references a multi-image wire here carries beside the edited image (OpenAI's ``/images/edits``
takes 16 images). A served backend whose model this client does not know declares it; the server then
refuses what its own model cannot take. ``serve generator`` refuses more at its boundary."""

POLICY_NEEDS: dict[str, int] = {"release": 0, "previous+inputs": 1, "anchor": 2}
"""References a ``loop.references`` policy needs at the least, checked at load time (the count of a
request's input images is known only when it runs): 'previous+inputs' sends the previous image as the
edited one and at least one input image as a reference; 'anchor' adds the first accepted image of the
sequence, so at least two. A request with more than the backend takes is refused when it is sent."""

MODEL_CAPS: tuple[tuple[str, int], ...] = (
    ("flux2klein", 3),
    ("flux.2-klein", 3),
    ("flux2pipeline", 5),
    ("flux.2-dev", 5),
)
"""References by lower-cased pipeline class or model id: FLUX.2 [klein] takes 4 input images, [dev] 6
at most as recommended (BFL's "Reference Images per Model"), the edited image among them."""

TAKERS = "diffusers FLUX.2, vllm-omni:, openai-images: gpt-image-*, gemini-image:, http: serve generator"


def model_reference_cap(name: str) -> int | None:
    """The references a FLUX.2 pipeline class (``Flux2KleinPipeline``) or model id
    (``black-forest-labs/FLUX.2-klein-4B``) takes, or None for a model the table does not know."""
    key = name.lower()
    return next((cap for part, cap in MODEL_CAPS if part in key), None)


def wire_images(request: ImageRequest) -> list[Image.Image]:
    """The images one call sends, in order: the edited image (if any), then the references as given."""
    return ([request.image] if request.image is not None else []) + list(request.references)


def file_name(index: int) -> str:
    """The multipart file name of the ``index``-th image a call sends (``image.png``, then references)."""
    return "image.png" if index == 0 else f"reference{index}.png"


def check_request(name: str, cap: int, request: ImageRequest) -> None:
    """:class:`ConfigError` when ``request`` carries more references than the backend ``name`` takes."""
    check_reference_count(name, cap, len(request.references))


def check_reference_count(name: str, cap: int, count: int) -> None:
    """:class:`ConfigError` when ``count`` references are more than the backend ``name`` takes: a server
    checks this before it decodes them."""
    if count > cap:
        taken = f"at most {cap} reference images" if cap else "no reference images"
        raise ConfigError(
            f"{name} takes {taken}, got {count}; lower them (loop.references: release sends none) "
            f"or use a generator that takes more ({TAKERS})."
        )


KINDS_WITHOUT_REFERENCES = frozenset({"fastvideo"})
"""Generator kinds that take no references whatever the model: refused from the spec, before loading."""


def check_references(backend: Any, policy: str) -> None:
    """Refuse, at load time, a ``loop.references`` policy the generator cannot follow (see :data:`POLICY_NEEDS`)."""
    check_policy(backend_name(backend), reference_cap(backend), policy)


def check_policy(name: str, cap: int, policy: str) -> None:
    """:class:`ConfigError` when a generator ``name`` taking ``cap`` references cannot follow ``policy``."""
    need = POLICY_NEEDS.get(policy, 0)
    if cap >= need:
        return
    taken = (
        f"takes only {cap} reference image{'s' if cap != 1 else ''}" if cap else "takes no reference images"
    )
    raise ConfigError(
        f"{name} {taken}, and loop.references: {policy} needs {need}; set loop.references: release "
        f"or use a generator that does ({TAKERS})."
    )
