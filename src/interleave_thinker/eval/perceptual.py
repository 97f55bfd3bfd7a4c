"""An offline consistency scorer: perceptual colour hashes of consecutive pictures, no VLM, on the CPU.

Each picture is reduced to colour hashes from the ``imagehash`` package (the ``perceptual`` extra):
``colorhash``, the share of the picture that is black, grey, and in each of six hues at two
saturations, taken at three nested crops around the centre (the whole picture, its middle 60% and its
centre 40%), so a subject near the middle weighs more than the edges. A pair's distance on one feature
is the Hamming distance over the hash's length (0 alike, 1 unrelated); the pair's consistency is
``10 * (1 - d)`` with ``d`` the weighted mean distance (:data:`FEATURES`), 0 to 10 like the VLM rubric.

Why these features: they are the best, on the drift suite's development seeds, of every set of one to
three hashes (colour at 3 or 4 bits, ``dhash``, ``whash``) at five crops, judged by the worst of AUROC
and localisation on identity and colour swaps; the grey-level hashes of the whole picture reached an
AUROC of about 0.8 on identity swaps at best. The figures, on held-out seeds, are in
docs/notes/consistency-drift.md. What it sees: a subject, a scene, a colour or a rendering swapped.
What it cannot: meaning, and shape alone (a subject redrawn in the same colours and layout scores as
consistent); a camera move or a subject leaving the centre reads as a break.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from PIL import Image

from interleave_thinker.core.errors import ConfigError

NAME = "perceptual"
LIBRARY = "imagehash"
INSTALL_HINT = "pip install 'interleave-thinker[perceptual]'"
FEATURES = {"colorhash4@1.0": 1.0, "colorhash@0.6": 1.0, "colorhash4@0.4": 1.0}
"""``HASH@CROP`` -> weight: the hash of the centred crop keeping CROP of each side (1.0 = the picture)."""
HASHES = ("colorhash", "colorhash4", "phash", "dhash", "whash")
"""``colorhash`` at 3 bits a bin (its default), ``colorhash4`` at 4 (finer shares); the grey hashes at 8x8."""
HASH_SIZE = 8
COLOUR_BINBITS = 3


def _imagehash() -> Any:
    try:
        import imagehash
    except ImportError as exc:
        raise ConfigError(
            f"the {NAME} consistency scorer needs the imagehash package: {INSTALL_HINT}"
        ) from exc
    return imagehash


def _spec(name: str) -> tuple[str, float]:
    kind, _, crop = name.partition("@")
    try:
        share = float(crop or 1.0)
    except ValueError:
        share = -1.0
    if kind not in HASHES or not 0.1 <= share <= 1.0:
        raise ConfigError(
            f"perceptual feature {name!r}: write HASH@CROP, HASH one of {', '.join(HASHES)}, CROP 0.1-1.0."
        )
    return kind, share


def centred(image: Image.Image, share: float) -> Image.Image:
    """The centred crop keeping ``share`` of each side (the picture itself at 1.0)."""
    if share >= 1.0:
        return image
    width, height = image.size
    dx, dy = round(width * (1 - share) / 2), round(height * (1 - share) / 2)
    return image.crop((dx, dy, width - dx, height - dy))


@dataclass(frozen=True)
class Features:
    hashes: dict[str, Any]


class PerceptualScorer:
    """``pairs(images)`` -> one consistency score (0-10) per consecutive pair, with each hash's distance."""

    name = NAME

    def __init__(self, features: dict[str, float] | None = None) -> None:
        self._lib = _imagehash()
        self.weights = dict(features or FEATURES)
        self._specs = {name: _spec(name) for name in self.weights}
        if not self.weights or any(w < 0 for w in self.weights.values()) or not sum(self.weights.values()):
            raise ConfigError(f"perceptual features {self.weights}: give non-negative weights, not all 0.")

    def provenance(self) -> dict[str, Any]:
        """What a score depends on: the library and its version, the hashes and their weights."""
        return {
            "scorer": NAME,
            "library": f"{LIBRARY}=={self._lib.__version__}",
            "weights": self.weights,
            "hash_size": HASH_SIZE,
        }

    def _hash(self, kind: str, image: Image.Image) -> Any:
        if kind.startswith("colorhash"):
            return self._lib.colorhash(image, binbits=int(kind.removeprefix("colorhash") or COLOUR_BINBITS))
        return getattr(self._lib, kind)(image, hash_size=HASH_SIZE)

    def features(self, image: Image.Image) -> Features:
        rgb = image.convert("RGB")
        return Features(
            {name: self._hash(kind, centred(rgb, crop)) for name, (kind, crop) in self._specs.items()}
        )

    def distances(self, first: Features, second: Features) -> dict[str, float]:
        out = {}
        for name in self.weights:
            a, b = first.hashes[name], second.hashes[name]
            out[name] = float(a - b) / a.hash.size
        return out

    def pair(self, first: Features, second: Features) -> dict[str, float]:
        distances = self.distances(first, second)
        total = sum(self.weights.values())
        distance = sum(self.weights[k] * d for k, d in distances.items()) / total
        return {**distances, "score": round(10.0 * (1.0 - distance), 4)}

    def pairs(self, images: list[Image.Image]) -> list[float]:
        """One score per consecutive pair (the drift suite's scorer signature)."""
        features = [self.features(image) for image in images]
        return [self.pair(a, b)["score"] for a, b in itertools.pairwise(features)]
