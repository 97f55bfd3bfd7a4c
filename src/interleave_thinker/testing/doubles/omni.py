"""A stand-in for a vLLM-Omni diffusion server, speaking its wire format, on 127.0.0.1.

Written from vLLM-Omni's own serving code (``vllm_omni/entrypoints/openai/protocol/images.py`` and the
``/v1/images/generations``, ``/v1/images/edits`` and ``/v1/models`` routes of ``api_server.py``) and
vLLM's error handlers:

- generations: a JSON body validated like ``ImageGenerationRequest`` (``n`` 1..10, ``size`` "WxH",
  ``response_format`` only ``b64_json``, ``num_inference_steps`` 1..200, ``guidance_scale`` and
  ``true_cfg_scale`` 0..20, ``seed``, ``negative_prompt``, ``generator_device``, ``output_format``);
  unlike the real server, unknown fields are refused, so a client typo cannot pass unnoticed;
- edits: ``multipart/form-data`` with the file field ``image`` and the same settings as form fields;
  several images as repeated ``image`` parts or ``image[]`` parts (the route reads ``image or image[]``),
  all handed to the engine as one list, the first setting an ``auto`` size; each received request
  keeps its image parts' bytes in order (``"images"``);
- replies ``{"created", "data": [{"b64_json", "url": null, "revised_prompt": null}], "output_format",
  "size"}``; errors ``{"error": {"message", "type", "param", "code"}}`` with vLLM-Omni's messages
  (model mismatch, size over ``--max-generated-image-size``, invalid size), validation errors as 400,
  ``{"error": "Unauthorized"}`` without the ``--api-key`` token, FastAPI's 404 for a missing route.

The engine behind it is a function of vLLM-Omni's sampling parameters: ``diffusers_engine`` runs a
diffusers pipeline as vLLM-Omni's diffusion worker would (seed on ``generator_device``, only the
settings that were sent), ``scripted_engine`` paints a colour derived from the parameters.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from PIL import Image
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from interleave_thinker.server.asgi import HTTPMiddleware
from interleave_thinker.testing.doubles.asgi import AppServer
from interleave_thinker.testing.doubles.generator import png_b64

Engine = Callable[[dict[str, Any]], Image.Image]
SETTINGS = ("negative_prompt", "num_inference_steps", "guidance_scale", "true_cfg_scale", "seed")


class GenerationRequest(BaseModel):
    """vLLM-Omni's ``ImageGenerationRequest`` fields and limits (extras refused here, ignored there)."""

    model_config = ConfigDict(extra="forbid")

    prompt: str
    model: str | None = None
    n: int = Field(default=1, ge=1, le=10)
    size: str | None = None
    response_format: str = "b64_json"
    user: str | None = None
    negative_prompt: str | None = None
    num_inference_steps: int | None = Field(default=None, ge=1, le=200)
    guidance_scale: float | None = Field(default=None, ge=0.0, le=20.0)
    true_cfg_scale: float | None = Field(default=None, ge=0.0, le=20.0)
    seed: int | None = None
    generator_device: str | None = None
    output_format: str | None = None


class EditForm(GenerationRequest):
    """The form fields of vLLM-Omni's ``edit_images`` route (the image comes as a file part)."""

    size: str | None = "auto"
    background: str | None = "auto"
    output_compression: int = Field(default=100, ge=0, le=100)
    stream: bool = False


@dataclass
class OmniState:
    """What the server serves and what it received; scripted failures and odd 200 replies come first."""

    engine: Engine
    model_name: str = "black-forest-labs/FLUX.2-klein-4B"
    max_pixels: int | None = None
    supports_edits: bool = True
    api_key: str | None = None
    delay: float = 0.0
    failures: list[tuple[int, str, dict[str, str]]] = field(default_factory=list)
    odd_replies: list[dict[str, Any]] = field(default_factory=list)
    received: list[dict[str, Any]] = field(default_factory=list)
    engine_calls: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def error_body(status: int, message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": HTTPStatus(status).phrase, "param": None, "code": status}}


def parse_size(size: str) -> tuple[int, int]:
    parts = size.split("x")
    if len(parts) != 2:
        raise HTTPException(400, f"Invalid size format: '{size}'. Expected format: 'WIDTHxHEIGHT'.")
    try:
        width, height = int(parts[0]), int(parts[1])
    except ValueError:
        raise HTTPException(
            400, f"Invalid size format: '{size}'. Width and height must be integers."
        ) from None
    if width <= 0 or height <= 0:
        raise HTTPException(
            400, f"Invalid size: {width}x{height}. Width and height must be positive integers."
        )
    return width, height


def add_error_shapes(app: FastAPI) -> None:
    """vLLM's handlers: ``HTTPException`` and validation errors become ``{"error": {...}}`` bodies."""

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        return JSONResponse(error_body(exc.status_code, str(exc.detail)), exc.status_code, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(error_body(400, str(exc)), 400)


@dataclass
class _Gate(HTTPMiddleware):
    """The API key and the scripted failures and odd replies, before any route (a plain ASGI wrapper, not
    ``@app.middleware("http")``: see :mod:`interleave_thinker.server.asgi`)."""

    state: OmniState

    async def handle(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        state, request = self.state, Request(scope)
        reply: JSONResponse | None = None
        if state.api_key and request.headers.get("authorization") != f"Bearer {state.api_key}":
            reply = JSONResponse({"error": "Unauthorized"}, 401)
        else:
            with state.lock:
                post = request.method == "POST"
                failure = state.failures.pop(0) if state.failures and post else None
                odd = state.odd_replies.pop(0) if state.odd_replies and post else None
            if odd is not None:
                state.received.append({"path": request.url.path, "odd": odd})
                reply = JSONResponse(odd)
            elif failure is not None:
                status, message, headers = failure
                state.received.append({"path": request.url.path, "failed": status})
                reply = JSONResponse(error_body(status, message), status, headers)
        if reply is None:
            await self.app(scope, receive, send)
        else:
            await reply(scope, receive, send)


def build_app(state: OmniState, *, edits_route: bool = True) -> FastAPI:
    """The app; ``edits_route=False`` is a server from before vLLM-Omni had ``/v1/images/edits``."""
    app = FastAPI()
    add_error_shapes(app)

    app.add_middleware(_Gate, state=state)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        state.received.append({"path": "/v1/models"})
        card = {"id": state.model_name, "object": "model", "created": 0, "owned_by": "vllm-omni"}
        return {"object": "list", "data": [{**card, "root": state.model_name, "parent": None}]}

    @app.post("/v1/images/generations")
    async def generations(request: Request) -> dict[str, Any]:
        body = await request.json()
        state.received.append({"path": request.url.path, "json": body, "headers": dict(request.headers)})
        try:
            params = GenerationRequest.model_validate(body)
        except ValidationError as exc:
            raise HTTPException(400, str(exc)) from None
        return await serve(state, params, None)

    async def edits(request: Request) -> dict[str, Any]:
        form = await request.form()
        uploads = [(k, v) for k, v in form.multi_items() if not isinstance(v, str)]
        fields = {k: v for k, v in form.multi_items() if isinstance(v, str)}
        read = [(k, (v.filename, v.content_type, await v.read())) for k, v in uploads]
        await form.close()
        parts = dict(read)  # the last part of each name, as before lists
        images = [p[2] for k, p in read if k == "image"] or [p[2] for k, p in read if k == "image[]"]
        state.received.append({"path": request.url.path, "form": fields, "files": parts, "images": images})
        if not images:
            raise HTTPException(422, "Field 'image' or 'url' is required")
        try:
            params = EditForm.model_validate(fields)
            pictures: list[Image.Image] = [Image.open(io.BytesIO(data)) for data in images]
            for picture in pictures:
                picture.load()
        except (ValidationError, OSError) as exc:
            raise HTTPException(400, str(exc)) from None
        if not state.supports_edits:
            raise HTTPException(400, f"{state.model_name} does not support image input (text-to-image only).")
        return await serve(state, params, pictures[0] if len(pictures) == 1 else pictures)

    if edits_route:
        app.post("/v1/images/edits")(edits)
    return app


async def serve(
    state: OmniState, request: GenerationRequest, image: Image.Image | list[Image.Image] | None
) -> dict[str, Any]:
    """Checks in vLLM-Omni's order, then one engine call per image; several input images reach the
    engine as one list (``image``), as vLLM-Omni's ``multi_modal_data``."""
    if request.model is not None and request.model != state.model_name:
        raise HTTPException(
            400,
            f"Model mismatch: request specifies '{request.model}' but server is running '{state.model_name}'.",
        )
    if request.response_format != "b64_json":
        raise HTTPException(400, "Only response_format 'b64_json' is supported now.")
    width = height = None
    if request.size and request.size != "auto":
        width, height = parse_size(request.size)
    elif image is not None:
        width, height = (image[0] if isinstance(image, list) else image).size
    if state.max_pixels is not None and width and height and width * height > state.max_pixels:
        raise HTTPException(
            400,
            f"Requested image size {width}x{height} exceeds the maximum allowed size of {state.max_pixels} pixels.",
        )
    params: dict[str, Any] = {k: getattr(request, k) for k in SETTINGS if getattr(request, k) is not None}
    params.update(prompt=request.prompt, width=width, height=height, image=image)
    params["generator_device"] = request.generator_device
    if state.delay:
        await asyncio.sleep(state.delay)  # a busy engine
    try:
        images = [await run_in_threadpool(state.engine, params) for _ in range(request.n)]
    except ValueError as exc:
        raise HTTPException(400, str(exc)) from None
    state.engine_calls.append(params)
    data = [{"b64_json": png_b64(i), "url": None, "revised_prompt": None} for i in images]
    return {"created": int(time.time()), "data": data, "output_format": "png", "size": f"{width}x{height}"}


def scripted_engine(params: dict[str, Any]) -> Image.Image:
    """A flat colour derived from every parameter, so any difference in the request shows in the image."""
    image = params.get("image")
    key = repr(sorted((k, v) for k, v in params.items() if k != "image"))
    for picture in image if isinstance(image, list) else [image] if image is not None else []:
        key += picture.tobytes().hex()[:256]
    digest = hashlib.sha256(key.encode()).digest()
    return Image.new(
        "RGB", (params["width"] or 64, params["height"] or 64), (digest[0], digest[1], digest[2])
    )


def diffusers_engine(pipe: Any) -> Engine:
    """Runs ``pipe`` with only the settings the request carried, seeded on its ``generator_device``."""
    import inspect

    import torch

    accepted = set(inspect.signature(pipe.__call__).parameters)
    lock = threading.Lock()

    def run(params: dict[str, Any]) -> Image.Image:
        kwargs = {k: v for k, v in params.items() if k in accepted and v is not None and k != "seed"}
        if "seed" in params:
            device = params.get("generator_device") or "cpu"  # the real server: its runner's device
            kwargs["generator"] = torch.Generator(device=device).manual_seed(params["seed"])
        image = kwargs.get("image")
        if image is not None:
            kwargs["image"] = (
                [i.convert("RGB") for i in image] if isinstance(image, list) else image.convert("RGB")
            )
        with lock, torch.inference_mode():
            return pipe(**kwargs).images[0]

    return run


class OmniServer(AppServer):
    """``with OmniServer(state) as server: server.url`` runs the app with uvicorn in a thread."""

    def __init__(self, state: OmniState, *, edits_route: bool = True) -> None:
        super().__init__(build_app(state, edits_route=edits_route), timeout_graceful_shutdown=2)
        self.state = state
