"""The ASGI app of `arena serve` (`server.app.make_app`) mounted without a network server,
in Starlette's TestClient: the key on every endpoint, Starlette's own refusals as the
server's JSON errors, a chunked body, the body cap without a Content-Length, and
concurrent requests answered by one backend call."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from starlette.testclient import TestClient

import server.app
from agents.backend import Generation
from server.app import make_app
from server.options import ServeOptions

MESSAGES = [{"role": "user", "content": "Rock, paper or scissors?"}]
KEY = {"Authorization": "Bearer k"}


class EchoBackend:
    """Answers each conversation with its last message reversed; records batch sizes."""

    name = "echo"

    def __init__(self):
        self.calls: list[int] = []

    def generate(self, conversations, params, allowed=None):
        self.calls.append(len(conversations))
        return [Generation(c[-1]["content"][::-1], [5], [-0.5], [1]) for c in conversations]


@pytest.fixture
def app():
    app = make_app(EchoBackend(), ServeOptions("echo", api_key="k", batch_wait=0.2))
    yield app
    app.state.batcher.close()


def test_errors_are_json_and_every_endpoint_needs_the_key(app, monkeypatch):
    with TestClient(app) as client:
        r = client.get("/health")
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        assert client.get("/health", headers=KEY).json() == {"status": "ok"}
        r = client.get("/nowhere", headers=KEY)
        assert r.status_code == 404
        assert r.json()["error"] == {
            "message": "no such endpoint: GET /nowhere",
            "type": "invalid_request_error",
            "code": 404,
        }
        r = client.get("/v1/chat/completions", headers=KEY)
        assert r.status_code == 405 and r.headers["Allow"] == "POST"
        assert r.json()["error"]["message"] == "method not allowed: GET /v1/chat/completions"
        body = json.dumps({"messages": MESSAGES}).encode()
        chunked = client.post(
            "/v1/chat/completions", headers=KEY, content=iter([body[:9], body[9:]])
        )
        assert chunked.json()["choices"][0]["message"]["content"] == MESSAGES[0]["content"][::-1]
        monkeypatch.setattr(server.app, "MAX_BODY", len(body) - 1)
        r = client.post("/v1/chat/completions", headers=KEY, content=iter([body[:9], body[9:]]))
        assert r.status_code == 413 and r.headers["Connection"] == "close"
        assert r.json()["error"]["message"] == f"request body is larger than {len(body) - 1} bytes"


def test_concurrent_requests_share_one_backend_call(app):
    async def ask_three() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
            asks = [
                client.post(
                    "/v1/chat/completions",
                    headers=KEY,
                    json={"messages": [{"role": "user", "content": f"move {i}"}]},
                )
                for i in range(3)
            ]
            return await asyncio.gather(*asks)

    replies = asyncio.run(ask_three())
    texts = [r.json()["choices"][0]["message"]["content"] for r in replies]
    assert texts == [f"move {i}"[::-1] for i in range(3)]
    assert app.state.batcher.backend.calls == [3]  # within batch_wait: one batch
    assert app.state.stats["requests"] == 3 and app.state.stats["peak_in_flight"] == 3
