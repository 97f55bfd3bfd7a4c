"""Images as ``data:`` URIs, bounded in size, so the page streams them without serving run files."""

from __future__ import annotations

import base64
import io

from PIL import Image

THUMB_SIDE = 256


def data_uri(image: Image.Image, max_side: int = THUMB_SIDE) -> str:
    """A PNG for small pictures, a JPEG for larger ones (a noisy 512² PNG is ~0.7 MB)."""
    copy = image.convert("RGB")
    copy.thumbnail((max_side, max_side))
    buffer = io.BytesIO()
    small = max(copy.size) <= 128
    copy.save(buffer, format="PNG" if small else "JPEG", quality=85)
    mime = "image/png" if small else "image/jpeg"
    return f"data:{mime};base64,{base64.b64encode(buffer.getvalue()).decode('ascii')}"
