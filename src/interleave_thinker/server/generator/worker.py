"""One worker process: loads the image backend on its device, then answers jobs from its pipe.

Why processes and not threads: a diffusion call holds the GIL in Python glue and a GPU context is
per process, so one process per device is the only way to use every device (and every CPU core)
at once; a crash (out of memory, a segfault in a kernel) then takes down one worker, not the service.

Messages on the pipe (plain dicts, so they pickle cheaply):

- worker -> parent once: ``{"event": "ready", "pid", "name"}`` or ``{"event": "failed", "error"}``;
- parent -> worker: an :class:`~.protocol.EditJob` as a dict, or ``None`` to stop;
- worker -> parent per job: ``{"event": "started"}`` as soon as it has the job (so the parent knows a
  worker that dies before it is safe to retry elsewhere), then ``{"ok": True, "image": base64 PNG, "timings": {...}}`` or
  ``{"ok": False, "kind": "input" | "backend", "error": str}``.
"""

from __future__ import annotations

import os
import signal
import time
from multiprocessing.connection import Connection
from typing import Any

from interleave_thinker.backends.protocols import ImageBackend, ImageRequest
from interleave_thinker.backends.references import check_reference_count
from interleave_thinker.backends.wrapping import reference_cap
from interleave_thinker.core.errors import ConfigError, InputError
from interleave_thinker.server.generator.protocol import (
    RequestError,
    decode_image,
    encode_png_b64,
    reference_field,
)


def load_backend(spec: str, device: str, threads: int | None, dtype: str = "auto") -> ImageBackend:
    """Load like any other caller does, so a served model behaves exactly as a local one."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("DIFFUSERS_VERBOSITY", "error")
    if threads is not None:
        # OpenMP threads that spin while waiting make a CPU worker 20x slower as soon as anything else
        # (the web process, a client, another service) wants a core; passive waiting costs little.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        import torch

        torch.set_num_threads(threads)
    try:
        from diffusers.utils import logging as diffusers_logging

        diffusers_logging.disable_progress_bar()
    except ImportError:  # pragma: no cover - diffusers is a dependency
        pass
    from interleave_thinker.backends.specs import BackendOptions, load_image_backend

    # seeded on the CPU on every device: the OpenAI route accepts generator_device "cpu" only, and a served
    # image equals the one the vllm-omni client's local counterpart makes with model.seed_device cpu
    return load_image_backend(spec, BackendOptions(device=device, dtype=dtype, seed_device="cpu"))


def job_request(backend: ImageBackend, job: dict[str, Any], max_pixels: int) -> ImageRequest:
    """The decoded request of a job; :class:`RequestError` (400) for an image that does not decode or
    more references than the backend takes (its ``max_references``), counted before any is decoded."""
    try:
        check_reference_count(backend.name, reference_cap(backend), len(job.get("reference_pngs", ())))
    except ConfigError as exc:
        raise RequestError(400, str(exc)) from None
    image = decode_image(job["image_png"], max_pixels) if job["image_png"] is not None else None
    references = tuple(
        decode_image(png, max_pixels, reference_field(i))
        for i, png in enumerate(job.get("reference_pngs", ()))
    )
    return ImageRequest(
        job["prompt"],
        image=image,
        width=job["width"],
        height=job["height"],
        seed=job["seed"],
        steps=job["steps"],
        guidance=job["guidance"],
        references=references,
    )


def run_job(backend: ImageBackend, job: dict[str, Any], max_pixels: int) -> dict[str, Any]:
    """Decode, generate, encode; any failure becomes an error reply instead of killing the worker."""
    start = time.perf_counter()
    try:
        request = job_request(backend, job, max_pixels)
    except RequestError as exc:
        return {"ok": False, "kind": "input", "error": exc.message}
    decoded = time.perf_counter()
    try:
        result = backend.generate(request)
    except InputError as exc:  # the model's own rules on its inputs (FLUX.2: sides of 64 px at least)
        return {"ok": False, "kind": "input", "error": str(exc)}
    except Exception as exc:
        return {"ok": False, "kind": "backend", "error": f"{type(exc).__name__}: {exc}"}
    generated = time.perf_counter()
    encoded = encode_png_b64(result)
    done = time.perf_counter()
    timings = {"decode_s": decoded - start, "pipeline_s": generated - decoded, "encode_s": done - generated}
    return {"ok": True, "image": encoded, "timings": timings}


def worker_main(
    spec: str, device: str, threads: int | None, max_pixels: int, conn: Connection, dtype: str = "auto"
) -> None:
    """Process entry point. Signals are ignored: the parent drains and stops workers itself, so a
    Ctrl-C or a SIGTERM to the whole process group cannot cut a generation short."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        backend = load_backend(spec, device, threads, dtype)
    except BaseException as exc:  # any load failure is reported, then the process ends
        conn.send({"event": "failed", "error": f"{type(exc).__name__}: {exc}"})
        return
    conn.send({"event": "ready", "pid": os.getpid(), "name": backend.name})
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):  # the parent is gone
            return
        if job is None:
            return
        try:
            conn.send({"event": "started"})
        except OSError:
            return
        reply = run_job(backend, job, max_pixels)
        try:
            conn.send(reply)
        except OSError:
            return
