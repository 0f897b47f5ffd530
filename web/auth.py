"""`arena web --api-key KEY`: every page, endpoint and static file asks for the key.

A request passes with any of: the session cookie (set by the login form at /login, or by
opening any page once with `?key=KEY`, which then redirects to the same address without
it, so the key does not stay in the address bar or the history), or an
`Authorization: Bearer KEY` header (for scripts reading the JSON endpoints). Without them,
a JSON endpoint (/api/...) answers 401 and a page redirects to the login form. The cookie
holds an HMAC of the key, not the key; keys are compared in constant time
(`hmac.compare_digest`). Without `--api-key` nothing is asked (the app binds 127.0.0.1
by default).
"""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import parse_qs, quote, urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

COOKIE = "arena_web_session"
LOGIN = "/login"


def session_token(key: str) -> str:
    """What the session cookie holds for `key`."""
    return hmac.new(key.encode(), b"arena web session", hashlib.sha256).hexdigest()


def same(a: str | None, b: str) -> bool:
    return a is not None and hmac.compare_digest(a.encode(), b.encode())


def local_target(target: str | None) -> str:
    """A redirect target that stays on this site ("/" for anything else)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


def with_session(response: Response, key: str) -> Response:
    """`response` with the session cookie of `key` set."""
    response.set_cookie(COOKIE, session_token(key), httponly=True, samesite="strict")
    return response


async def form_fields(request: Request) -> dict[str, str]:
    """The fields of a URL-encoded form body (the login form's)."""
    body = (await request.body()).decode("utf-8", errors="replace")
    return {k: v[0] for k, v in parse_qs(body).items()}


class ApiKey:
    """ASGI middleware that asks every request but the login form's for the key."""

    def __init__(self, app: ASGIApp, key: str) -> None:
        self.app, self.key, self.token = app, key, session_token(key)

    def allowed(self, request: Request) -> bool:
        header = request.headers.get("authorization", "")
        bearer = header[7:].strip() if header.lower().startswith("bearer ") else None
        return same(bearer, self.key) or same(request.cookies.get(COOKIE), self.token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] == LOGIN:
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        if self.allowed(request):
            await self.app(scope, receive, send)
            return
        if same(request.query_params.get("key"), self.key):
            rest = [(k, v) for k, v in request.query_params.multi_items() if k != "key"]
            target = request.url.path + (f"?{urlencode(rest)}" if rest else "")
            response: Response = with_session(RedirectResponse(target, 303), self.key)
        elif scope["path"].startswith("/api/"):
            response = JSONResponse({"error": "this endpoint needs the API key"}, 401)
        else:
            here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            response = RedirectResponse(f"{LOGIN}?next={quote(here, safe='')}", 303)
        await response(scope, receive, send)
