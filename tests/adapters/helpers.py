"""Shared pieces of the adapter tests: driving either shell, loopback clients, small PNGs."""

from __future__ import annotations

import asyncio
import base64
import functools
import io
from typing import Any, Final

import httpx
from PIL import Image

from adapters.contract import ModelRequest, ModelResponse
from adapters.engine.client import HttpModelClient
from adapters.registry import client_for
from osharm_core import ImagePart
from tests.adapters.conftest import FAKE_KEY

#: The two shells every engine scenario runs through.
MODES: Final = ("sync", "async")

#: Short timeouts for clients of the loopback server, so nothing can hang.
TIMEOUT: Final = httpx.Timeout(5.0, connect=2.0)


def call(client: HttpModelClient, request: ModelRequest, mode: str) -> ModelResponse:
    """One call through the sync or the async shell (the async one in a fresh event loop).

    After the call the client closes what it built (it builds afresh if used
    again); clients passed in stay open.
    """
    if mode == "sync":
        with client:
            return client.complete(request)

    async def run() -> ModelResponse:
        try:
            return await client.acomplete(request)
        finally:
            await client.aclose()

    return asyncio.run(run())


def loopback_client(model: str, base_url: str, **options: Any) -> HttpModelClient:
    """`client_for(model)` aimed at `base_url` with the fake key and short timeouts."""
    client = client_for(
        model, **{"base_url": base_url, "api_key": FAKE_KEY, "timeout": TIMEOUT, **options}
    )
    assert isinstance(client, HttpModelClient)
    return client


@functools.cache  # an ImagePart is immutable; encoding a screen-sized PNG takes ~30 ms
def png_part(width: int, height: int, colour: str = "white") -> ImagePart:
    """A one-colour PNG of the given size, base64 as the core hands images over."""
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), colour).save(buffer, format="PNG")
    return ImagePart(base64.b64encode(buffer.getvalue()).decode())
