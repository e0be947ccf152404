"""Embeddings providers (AG-10, AG-11, ES-67) against the scripted server on a real socket."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from shared import config
from shared.providers import (
    BatchRefused,
    HttpEmbedder,
    RateLimited,
    ServerFailed,
    build_embedder,
    hash_vector,
)
from tests.support.llm_servers import EmbeddingsServer, Reply


def _embedder(srv: EmbeddingsServer, **kw: object) -> HttpEmbedder:
    entry = config.Embeddings(
        type="openai-compatible", model="scripted-hash-256", base_url=srv.base_url, **kw
    )  # type: ignore[arg-type]
    e = build_embedder(entry)
    assert isinstance(e, HttpEmbedder)
    return e


def test_batches_of_128_and_vectors_filed_by_index() -> None:
    texts = [f"page number {i} about topic{i % 7}" for i in range(300)]
    with EmbeddingsServer() as srv:
        e = _embedder(srv)

        async def run() -> np.ndarray:
            try:
                return await e.embed(texts)
            finally:
                await e.aclose()

        out = asyncio.run(run())
        assert [len(b) for b in srv.inputs()] == [128, 128, 44]
        assert out.shape == (300, 256)
        assert np.allclose(out[17], hash_vector(texts[17]), atol=1e-6)


def test_shuffled_indices_are_filed_by_index_and_a_repeat_is_refused_whole() -> None:
    texts = ["alpha beta", "gamma delta", "epsilon"]

    async def run(srv: EmbeddingsServer) -> None:
        e = _embedder(srv)
        try:
            srv.add(Reply(EmbeddingsServer.answer(texts, [2, 0, 1])))
            out = await e.embed(texts)
            assert np.allclose(out[0], hash_vector("alpha beta"), atol=1e-6)
            srv.add(Reply(EmbeddingsServer.answer(texts, [0, 0, 1])))
            with pytest.raises(BatchRefused):
                await e.embed(texts)
            srv.add(Reply(EmbeddingsServer.answer(texts, [0, 1])))
            with pytest.raises(BatchRefused):
                await e.embed(texts)
        finally:
            await e.aclose()

    with EmbeddingsServer() as srv:
        asyncio.run(run(srv))


def test_503_is_a_server_failure_and_429_benches_the_entry() -> None:
    async def run(srv: EmbeddingsServer) -> None:
        e = _embedder(srv)
        try:
            srv.add(Reply({"error": {"message": "down"}}, status=503))
            with pytest.raises(ServerFailed):
                await e.embed(["x"])
            srv.add(Reply({"error": {"message": "slow down"}}, status=429, headers={"Retry-After": "90"}))
            with pytest.raises(RateLimited):
                await e.embed(["x"])
            calls = len(srv.seen)
            with pytest.raises(RateLimited):  # benched: the server is not asked again
                await e.embed(["x"])
            assert len(srv.seen) == calls
            assert 60 <= e.benched_for <= 90
        finally:
            await e.aclose()

    with EmbeddingsServer() as srv:
        asyncio.run(run(srv))
