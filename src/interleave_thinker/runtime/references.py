"""The reference images of each attempt (``loop.references``): what keeps the subject across steps.

The released loop gives the generator only the latest image and shows the critic only that image and
the new one, so a character or a style drifts as edits accumulate. A policy adds reference images to
each call (``ImageRequest.references``); the generator's ``image`` is, under every policy, the latest
image of the sequence, as in the release. The call shape of an attempt, by policy:

- ``release`` (the default): ``image`` = the previous image, ``references`` = () - the released call.
- ``previous+inputs``: ``references`` = the request's input images, in order.
- ``anchor``: ``references`` = the request's input images, then the first accepted image of the
  sequence (the anchor).

A reference that is the ``image`` of the call (the same file) is left out, so no image is sent twice:
the first edit of a guidance request (whose ``image`` is its last input) or the edit right after the
anchor get fewer references, and a narrative request has no inputs. A generator that declares
``max_references`` gets at most that many: the last ones, so the anchor stays. The critic sees the
same references after the before and after images (``agents/critic.py``), and each attempt records
their file names (``Attempt.references``).

The anchor is read from the trace (the first step with an accepted image), never kept apart from it,
so a resumed run, whose trace and images hold its complete steps, finds the same anchor.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from PIL import Image

from interleave_thinker.agents.critic import REFERENCES_TEMPLATE, references_template_digest
from interleave_thinker.core.config import ReferencePolicy
from interleave_thinker.core.types import Trace

Named = tuple[Image.Image, str]
"""An image and its file name in the run (``images/``)."""


@dataclass
class References:
    """Chooses each attempt's references under ``policy`` from the inputs and the trace's steps."""

    policy: ReferencePolicy
    inputs: list[Named]
    trace: Trace
    images: Mapping[str, Image.Image]
    """The run's images by file name (``RunRecorder.images``), where the anchor is read from."""
    limit: int | None = None
    """The generator's ``max_references``; None = as many as the policy gives."""
    _anchor: Named | None = field(default=None, repr=False)

    @property
    def on(self) -> bool:
        return self.policy != "release"

    def note_template(self) -> None:
        """Record the digest of the critic's references template in the trace, when the policy is on
        (a released loop's trace is left as it was)."""
        if self.on and self.trace.templates is not None:
            self.trace.templates.digests.setdefault(REFERENCES_TEMPLATE, references_template_digest())

    def for_attempt(self, latest: Named | None) -> list[Named]:
        """The references of an attempt whose ``image`` is ``latest`` (in order; empty under ``release``)."""
        if not self.on:
            return []
        chosen = list(self.inputs)
        anchor = self.anchor() if self.policy == "anchor" else None
        if anchor is not None:
            chosen.append(anchor)
        sent = latest[1] if latest is not None else None
        chosen = [ref for ref in chosen if ref[1] != sent]
        if self.limit is not None:
            chosen = chosen[len(chosen) - self.limit :] if self.limit < len(chosen) else chosen
        return chosen

    def anchor(self) -> Named | None:
        """The first accepted image of the sequence, or None before a step has one."""
        name = next((s.accepted_image for s in self.trace.steps if s.accepted_image), None)
        if name is None:
            return None
        if self._anchor is None or self._anchor[1] != name:
            self._anchor = (self.images[name], name)  # read once: a run folder's images are decoded on read
        return self._anchor
