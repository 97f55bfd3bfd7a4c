"""One cheap call to each served backend before long work, so a dead or confused service stops a command
in seconds with one line instead of hours of fallbacks (docs/failures.md, "Checked before long work").

`batch`, `data generate`, `eval generate` and `eval run` ask each served chat backend for one short
reply and each served generator for one image at the run's size (:func:`check_served`); `train grpo`'s
step-wise reward also asks its judge for one SC and one PQ judgement, which must parse
(:func:`check_judgement`). A backend that loads a model into this process (``tiny:``, ``transformers:``,
``diffusers:``) is not checked: it has no service to be down, and loading it already proved it.
``remote.preflight: false`` (``--no-preflight``) skips the checks.
"""

from __future__ import annotations

from collections.abc import Mapping

from PIL import Image

from interleave_thinker.agents.judge import Judge, Judgement, judge_inputs
from interleave_thinker.agents.messages import text_part, user_turn
from interleave_thinker.backends.protocols import ImageBackend, ImageRequest, VLMBackend
from interleave_thinker.backends.specs import BackendOptions, is_local
from interleave_thinker.backends.wrapping import close_backend
from interleave_thinker.core.errors import BackendError, InterleaveThinkerError
from interleave_thinker.core.redact import redact_credentials, redact_spec
from interleave_thinker.core.sanitize import clean_text

SKIP = "--no-preflight (remote.preflight: false) skips this check"
PROBE_TEXT = "Reply with the word ready."
PROBE_PROMPT = "a red circle on a white background"
"""What the generator is asked to draw, and the instruction the judge scores it against."""
PROBE_TOKENS = 16
IMAGE_ROLES = frozenset({"generator"})


def served(spec: str) -> bool:
    """Whether ``spec`` names a service (checked) rather than a model loaded into this process (not)."""
    return not is_local(spec)


def _shown(text: str, limit: int = 160) -> str:
    flat = " ".join(clean_text(text).split())
    return repr(flat if len(flat) <= limit else flat[: limit - 3] + "...")


def _failed(role: str, spec: str, what: str) -> BackendError:
    return BackendError(f"preflight: the {role} {redact_spec(spec)} {what}; fix it or its spec ({SKIP}).")


def _first_line(exc: BaseException) -> str:
    text = redact_credentials(str(exc).strip().split("\n", 1)[0])
    if isinstance(exc, InterleaveThinkerError) and text:
        return text  # ours already say what failed; a vendor's is named by its class
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def check_chat(role: str, spec: str, backend: VLMBackend) -> str:
    """One short reply from a served chat backend (any text passes: its content is the role's to judge)."""
    try:
        return backend.chat(user_turn(text_part(PROBE_TEXT)), max_new_tokens=PROBE_TOKENS, temperature=0.0)
    except Exception as exc:  # whatever the service or its client raised is the line to show
        raise _failed(role, spec, f"did not answer a one-line chat call ({_first_line(exc)})") from exc


def check_generator(spec: str, backend: ImageBackend, width: int, height: int) -> Image.Image:
    """One image from a served generator at the size the run asks."""
    request = ImageRequest(PROBE_PROMPT, width=width, height=height, seed=0)
    try:
        return backend.generate(request)
    except Exception as exc:  # whatever the service or its client raised is the line to show
        raise _failed(
            "generator", spec, f"did not answer one {width}x{height} image ({_first_line(exc)})"
        ) from exc


def probe_image(width: int, height: int) -> Image.Image:
    """What a judge scores when no served generator drew one: a red disc on white, at the run's size."""
    from PIL import ImageDraw

    image = Image.new("RGB", (width, height), "white")
    box = (width // 4, height // 4, 3 * width // 4, 3 * height // 4)
    ImageDraw.Draw(image).ellipse(box, fill=(220, 30, 30))
    return image


def check_judgement(spec: str, judge: Judge, after: Image.Image) -> Judgement:
    """One SC judgement (a white canvas to ``after``, for :data:`PROBE_PROMPT`) and one PQ judgement of
    ``after``, as the step-wise reward asks them; both must parse into scores."""
    before, after = judge_inputs(Image.new("RGB", after.size, "white"), after)
    for kind, judgement in (
        ("SC", judge.semantic(before, after, PROBE_PROMPT)),
        ("PQ", judge.quality(after)),
    ):
        score = judgement.sc if kind == "SC" else judgement.pq
        if score is None:
            replies = judgement.raw_replies.get(kind.lower()) or []
            answered = f"; it answered {_shown(replies[-1])}" if replies else ""
            error = (judgement.error or "no score").split("\n", 1)[0]
            raise _failed("judge", spec, f"gave no {kind} score ({error}{answered})")
    return judgement


def check_served(
    specs: Mapping[str, str], options: BackendOptions, size: tuple[int, int] = (1024, 1024)
) -> list[str]:
    """One call to each served backend of ``specs`` (role -> spec; ``generator`` is an image backend,
    every other role a chat backend), in order; the first failure raises :class:`BackendError` naming the
    role, the spec and what it answered. Returns the roles checked."""
    from interleave_thinker.backends.specs import load_image_backend, load_vlm_backend

    checked: list[str] = []
    for role, spec in specs.items():
        if not served(spec):
            continue
        try:
            backend = (
                load_image_backend(spec, options)
                if role in IMAGE_ROLES
                else load_vlm_backend(spec, options, role=role)
            )
        except InterleaveThinkerError as exc:
            raise _failed(role, spec, f"could not be reached ({_first_line(exc)})") from exc
        try:
            if role in IMAGE_ROLES:
                check_generator(spec, backend, *size)  # type: ignore[arg-type]
            else:
                check_chat(role, spec, backend)  # type: ignore[arg-type]
        finally:
            close_backend(backend)
        checked.append(role)
    return checked
