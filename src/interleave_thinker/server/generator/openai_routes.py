"""``POST /v1/images/generations``, ``POST /v1/images/edits`` and ``GET /v1/models`` beside ``/edit``.

Why: the ``vllm-omni:`` generator backend (and any OpenAI images client) then drives this service as
it drives vLLM-Omni or SGLang Diffusion, so one config line moves a user between them. The routes
share ``/edit``'s workers, queue, deadline, body and pixel limits, metrics and bearer token; only the
request and reply formats differ. Errors use vLLM's shape ``{"error": {"message", "type", "param",
"code"}}`` that those clients read.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser

from interleave_thinker.core.errors import RequestError
from interleave_thinker.server.generator.guards import admit, check_token
from interleave_thinker.server.generator.openai_protocol import error_body, parse_edit_form, parse_generation
from interleave_thinker.server.generator.protocol import MAX_REFERENCES, EditJob

RunJob = Callable[[EditJob, float, Request], Awaitable[tuple[str, dict[str, Any]]]]
MAX_FORM_FIELDS = 64
"""The engines' edit form has about a dozen fields; more is not a client of this API."""


def openai_error(exc: RequestError) -> JSONResponse:
    return JSONResponse(error_body(exc.status, exc.message), status_code=exc.status, headers=exc.headers)


IMAGE_FIELDS = ("image", "image[]")
"""The file fields of the input images: ``image`` (repeated for several, as vLLM-Omni reads them) or
``image[]`` (how ``openai-python`` sends a list)."""


async def read_form(request: Request, body: bytes, limit: int) -> tuple[dict[str, str], list[bytes]]:
    """Text fields and the image files, in order, of an already size-checked multipart body."""
    if not request.headers.get("content-type", "").lower().startswith("multipart/form-data"):
        raise RequestError(400, "/v1/images/edits takes multipart/form-data with the PNG file field 'image'.")

    async def chunks() -> AsyncGenerator[bytes, None]:
        yield body

    # One file more than the images taken, so that too many is refused with our own message.
    files = 2 + MAX_REFERENCES
    parser = MultiPartParser(
        request.headers, chunks(), max_files=files, max_fields=MAX_FORM_FIELDS, max_part_size=limit
    )
    try:
        form = await parser.parse()
    except MultiPartException as exc:
        raise RequestError(400, f"The multipart body is not readable: {exc.message}.") from None
    fields: dict[str, str] = {}
    pngs: list[bytes] = []
    try:
        for key, value in form.multi_items():
            if isinstance(value, UploadFile):
                if key in IMAGE_FIELDS:
                    pngs.append(await value.read())
            else:
                fields[key] = value
    finally:
        await form.close()
    return fields, pngs


def add_openai_routes(app: FastAPI, run_job: RunJob) -> None:
    """Register the routes; ``run_job`` queues a checked job exactly as ``/edit`` does."""
    settings, metrics, workers = app.state.settings, app.state.metrics, app.state.pool

    def served() -> str:
        return str(settings.generator)

    def limits() -> dict[str, Any]:
        return {
            "served": served(),
            "max_pixels": settings.max_pixels,
            "max_prompt_chars": settings.max_prompt_chars,
        }

    async def answer(job: EditJob, arrived: float, request: Request) -> JSONResponse:
        image, _ = await run_job(job, arrived, request)
        return JSONResponse(
            {"created": int(time.time()), "data": [{"b64_json": image, "revised_prompt": None}]}
        )

    @app.get("/v1/models")
    async def models(request: Request) -> JSONResponse:
        try:
            check_token(request, settings.api_key)
        except RequestError as exc:
            return openai_error(exc)
        names = [slot.backend_name for slot in workers.slots if slot.backend_name]
        card = {"id": served(), "object": "model", "created": 0, "owned_by": "interleave-thinker"}
        return JSONResponse({"object": "list", "data": [{**card, "root": names[0] if names else served()}]})

    async def respond(request: Request, parse: Callable[[bytes], Awaitable[EditJob]]) -> JSONResponse:
        arrived = time.monotonic()
        try:
            job = await admit(request, settings, metrics, parse)
            return await answer(job, arrived, request)
        except RequestError as exc:
            return openai_error(exc)

    @app.post("/v1/images/generations")
    async def generations(request: Request) -> JSONResponse:
        async def parse(body: bytes) -> EditJob:
            return parse_generation(body, **limits())

        return await respond(request, parse)

    @app.post("/v1/images/edits")
    async def edits(request: Request) -> JSONResponse:
        async def parse(body: bytes) -> EditJob:
            fields, pngs = await read_form(request, body, settings.max_body_bytes)
            return await asyncio.to_thread(parse_edit_form, fields, pngs, **limits())

        return await respond(request, parse)
