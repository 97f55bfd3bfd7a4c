"""The settings sections about services rather than the loop: the remote transport, the released
prompts' source, prices, and evaluation bounds.

Why apart from ``core/config.py``: that module holds the pipeline's model and the loop's settings, and
stays small enough to read in one sitting; these sections are re-exported from it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from interleave_thinker.core.prompt_store import TemplateStore


class Section(BaseModel):
    """A settings section: unknown keys are errors, assignments validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def count(default: int | None, description: str | None = None) -> Any:
    """A field that counts something (calls, tokens, pixels, steps): at least 1; a default of None (no
    bound, or decided elsewhere) means what ``description`` says. The one spelling of that rule."""
    return Field(default=default, ge=1, description=description)


def choice(default: str, description: str) -> Any:
    """A field that takes one of its ``Literal`` type's values: the type lists them (and so the flag's
    choices), ``default`` is the release's behaviour wherever the release has one."""
    return Field(default=default, description=description)


def unset(
    description: str, *, gt: float | None = None, ge: float | None = None, le: float | None = None
) -> Any:
    """A field that is None unless set, ``description`` saying what None means; the bounds hold a value
    when one is given."""
    return Field(default=None, description=description, gt=gt, ge=ge, le=le)


class RemoteOptions(Section):
    """Transport settings of served backends (openai:, http:, gemini:, ...)."""

    timeout: float = Field(default=300.0, gt=0, description="Seconds per HTTP request of a served backend.")
    max_retries: int = Field(
        default=4,
        ge=0,
        description="Retries on connection errors, timeouts and 408/429/5xx except 501 (never other 4xx).",
    )
    backoff_base: float = Field(
        default=0.5, ge=0, description="First retry delay in seconds; doubled each retry, with 50 % jitter."
    )
    backoff_max: float = Field(default=8.0, ge=0, description="Cap of one retry delay, seconds.")
    deadline: float | None = unset("Total seconds per call, retries and a dripping reply included.", gt=0)
    concurrency: int = count(
        8,
        "Calls in flight per served backend; in `batch`, the default per-backend limit of a served "
        "backend (`--per-backend-limit` overrides it).",
    )
    cooldown: float = Field(
        default=30.0, ge=0, description="Seconds an endpoint that failed is skipped in a pool."
    )
    api_key_env: str | None = unset(
        "Environment variable holding the API key (default: the service's own, e.g. OPENAI_API_KEY, "
        "GEMINI_API_KEY)."
    )
    max_reply_mb: float = Field(
        default=64.0, gt=0, description="Largest reply of a served backend in MiB (after gzip), cut early."
    )
    max_image_pixels: int = count(4096 * 4096, "Largest reply image (width x height), read before decoding.")
    preflight: bool = Field(
        default=True,
        description="Before the first request or rollout, make one cheap call to each served backend the "
        "command uses (and for `train grpo`'s step-wise reward one image and one SC + PQ judgement) and stop "
        "with one line if one does not answer usably; false (--no-preflight) skips it.",
    )


class PromptOptions(Section):
    folder: Path | None = unset(
        "Folder holding the released templates as <name>.txt (default: $INTERLEAVE_THINKER_PROMPTS)."
    )
    cache_dir: Path | None = unset("Template cache (default: <home>/prompts).")
    base_url: str | None = unset(
        "Mirror to download the authors' source files from (default: their raw GitHub files, or "
        "$INTERLEAVE_THINKER_PROMPTS_URL)."
    )
    download: bool = Field(default=True, description="Download the released templates when not cached.")
    verify: bool = Field(
        default=True,
        description="Check every released template's SHA-256 (false allows edited templates, recorded as custom).",
    )
    builtin_fallback: bool = Field(
        default=True, description="Use our own templates when the released ones are unavailable."
    )

    def store(self) -> TemplateStore:
        """The template store these settings describe: the one way every command and trainer builds it.

        The fields are named as ``TemplateStore``'s keyword arguments, so they pass straight through.
        """
        from interleave_thinker.core.prompt_store import TemplateStore

        return TemplateStore(**dict(self))


class RolePrices(Section):
    """Prices of one backend role, in any one currency; 0 = free or unknown."""

    per_call: float = Field(default=0.0, ge=0, description="Price of one call.")
    per_1k_input_tokens: float = Field(
        default=0.0, ge=0, description="Price of 1,000 input tokens (as the server reports them)."
    )
    per_1k_output_tokens: float = Field(
        default=0.0, ge=0, description="Price of 1,000 output tokens (as the server reports them)."
    )
    per_image: float = Field(default=0.0, ge=0, description="Price of one generated image.")


class PriceOptions(Section):
    """What each backend role costs, for the estimated cost of `data generate` (docs/data.md)."""

    currency: str = Field(default="USD", description="Label of the prices' currency in the summary.")
    planner: RolePrices = Field(default_factory=RolePrices, description="Prices of the planner's calls.")
    critic: RolePrices = Field(default_factory=RolePrices, description="Prices of the critic's calls.")
    judge: RolePrices = Field(default_factory=RolePrices, description="Prices of the judge's calls.")
    generator: RolePrices = Field(default_factory=RolePrices, description="Prices of the generator's calls.")


class EvalOptions(Section):
    """Bounds of `eval score` on what it reads and what it asks (docs/evaluation.md)."""

    max_image_bytes: int = count(
        64 * 1024 * 1024,
        "`eval score`: largest image file an item may hold (bytes); a larger one fails the item.",
    )
    max_image_pixels: int = count(
        4096 * 4096,
        "`eval score`: most pixels an image may declare in its header; more fails the item, undecoded.",
    )
    judge_calls_per_item: int = count(
        100, "`eval score`: judge calls one item may make (all its questions and attempts); then it fails."
    )
    judge_calls_per_run: int = count(
        50_000, "`eval score`: judge calls one run may make; then every question left fails, recorded."
    )


class ScaleOptions(Section):
    """Running a batch command across the nodes of a Ray cluster (docs/cluster.md)."""

    ray_address: str | None = unset(
        "Ray cluster to run on (--ray): 'auto' (the cluster `ray start` joined), 'local' (one "
        "started in this process) or HOST:PORT; none = this process alone."
    )
    object_store_mb: int = Field(
        default=128,
        ge=80,
        description="Object store of the cluster `--ray local` starts (MB); requests and replies are small.",
    )
