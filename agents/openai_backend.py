"""The HTTP backend: any OpenAI-compatible chat-completions server (vLLM, `arena serve`, ...).

`OpenAIBackend(base_url, model)` implements the `Backend` protocol (`agents.backend`) by
sending one POST /chat/completions per conversation, at most `concurrency` in flight at
once, and returning the answers in order. The requests run on an asyncio event loop in
one background thread (`httpx.AsyncClient`), so each attempt can have a true deadline
(below).

Request body per conversation:
    model, messages, max_tokens, temperature, top_p, seed, n=1, logprobs=true
    and, when `extensions=True` (the default; vLLM and `arena serve` accept them):
    return_token_ids=true        ask for `choices[0].token_ids` and `prompt_token_ids`
    structured_outputs={"choice": allowed[i]}   constrained decoding (vLLM >= 0.10.2
                                 and `arena serve`; `guided="guided_choice"` sends the
                                 older vLLM / `arena serve` field `guided_choice` instead)
    `extra_body` is merged into every request (e.g. {"top_k": 20}).
Set `extensions=False` for servers that reject unknown fields (api.openai.com answers 400
"Unrecognized request argument"); then constrained decoding raises ValueError.

What each `Generation` holds:
    text              choices[0].message.content: a string, the OpenAI schema's list of
                      text parts (joined), or "" if null (`agents.backend.content_text`).
                      Any other content (a number, a non-text part) is a malformed
                      response: an error generation (below)
    logprobs          choices[0].logprobs.content[*].logprob (empty if the server sent none)
    token_ids         choices[0].token_ids when the server returns them (vLLM with
                      return_token_ids, `arena serve`), else empty: the OpenAI API only
                      returns token strings, which do not map back to ids reliably
    prompt_token_ids  top-level prompt_token_ids, when present, else empty
    finish_reason     "stop" | "length" as the server says (anything else is kept as is),
                      "error" when the request failed (below; `error` says why)

Deadline. `timeout` bounds each attempt as a whole (connecting, sending, and reading the
full answer; waiting for one of the `concurrency` slots is not counted): httpx's own
timeouts apply per read, so a server trickling a byte every 0.4 s held a `timeout=1`
request for 12 s. A request's worst case is `(max_retries + 1) * timeout` plus backoff.

Failures. Timeouts, connection errors, HTTP 429 and 5xx are retried up to `max_retries`
times with exponential backoff and jitter (`backoff * 2**attempt`, scaled by a random
factor in [0.5, 1], capped at `max_backoff`; a numeric Retry-After header is honoured up
to the cap). Other 4xx answers are not retried. When a request still fails, its
conversation gets `Generation(text="", finish_reason="error", error=REASON)`, the
one-line reason is logged (logger "agents.openai_backend") and appended to
`backend.errors`, and the other conversations of the batch are unaffected. Why not raise: one flaky request must not
throw away a whole batch of answers or abort a run; an empty completion is an invalid
reply, so the LLM agent's invalid-move policy (correction retries, then the fallback)
takes over and the turn's record shows it, and the match finishes normally.
Misconfiguration is different: 401, 403 and 404 (bad key, unknown model or URL) would
fail every request alike, so they raise `RuntimeError` at once; the arena then stops, and
the matches already finished are on disk.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading

import httpx

from agents.backend import Generation, SamplingParams, content_text, request_rows

log = logging.getLogger(__name__)

FATAL_STATUS = (401, 403, 404)  # the same for every request: raise instead of degrading


class _Retryable(Exception):
    """A failure worth retrying (timeout, connection error, 429, 5xx)."""

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


class _Failed(Exception):
    """A failure that retrying will not fix for this request (4xx other than fatal ones)."""


class OpenAIBackend:
    """Chat completions from an OpenAI-compatible server.

    Args:
        base_url: server root including the version, e.g. "http://127.0.0.1:8000/v1".
        model: the `model` field sent with every request.
        api_key: sent as "Authorization: Bearer <key>" when given.
        timeout: seconds per request attempt, a deadline for the whole attempt.
        max_retries: extra attempts after the first on retryable failures.
        concurrency: most requests in flight at once.
        backoff: base delay in seconds before the first retry (doubles per retry).
        max_backoff: cap on any one delay, seconds.
        extensions: send vLLM-style extension fields (see the module docstring).
        guided: request field for constrained decoding: "structured_outputs" or "guided_choice".
        extra_body: extra fields merged into every request body.
        name: backend name (default: `model`).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = 120.0,
        max_retries: int = 3,
        concurrency: int = 16,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        extensions: bool = True,
        guided: str = "structured_outputs",
        extra_body: dict | None = None,
        name: str | None = None,
    ):
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        if backoff < 0 or max_backoff < 0:
            raise ValueError(f"backoff and max_backoff must be >= 0, got {backoff}, {max_backoff}")
        if guided not in ("structured_outputs", "guided_choice"):
            raise ValueError(
                f"guided must be 'structured_outputs' or 'guided_choice', got {guided!r}"
            )
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.timeout = timeout
        self.model = model
        self.name = name or model
        self.max_retries = max_retries
        self.concurrency = concurrency
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.extensions = extensions
        self.guided = guided
        self.extra_body = dict(extra_body or {})
        self.errors: list[str] = []  # one line per request that failed after all retries
        self._errors_lock = threading.Lock()
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(
            headers=headers,
            timeout=httpx.Timeout(timeout),
            limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency),
        )
        self._slots = asyncio.Semaphore(
            concurrency
        )  # requests in flight; waiting here is not timed
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="openai-backend", daemon=True
        )
        self._thread.start()

    def generate(
        self,
        conversations: list[list[dict]],
        params: SamplingParams,
        allowed: list[list[str] | None] | None = None,
    ) -> list[Generation]:
        """One completion per conversation, requested concurrently (see the module docstring)."""
        rows = request_rows(conversations, params, allowed)
        if not self.extensions and any(a is not None for a in rows):
            raise ValueError(
                "constrained decoding needs extensions=True (a vLLM-compatible server such as `arena serve`)"
            )
        bodies = [
            self._body(
                conv,
                params,
                rows[i],
                params.seeds[i] if params.seeds else params.seed,
            )
            for i, conv in enumerate(conversations)
        ]
        return asyncio.run_coroutine_threadsafe(self._batch(bodies), self._loop).result()

    def close(self) -> None:
        """Close the connections and stop the event loop thread."""
        if self._loop.is_closed():
            return
        asyncio.run_coroutine_threadsafe(self._client.aclose(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> OpenAIBackend:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _body(
        self,
        conversation: list[dict],
        params: SamplingParams,
        allowed: list[str] | None,
        seed: int | None = None,
    ) -> dict:
        body = {
            "model": self.model,
            "messages": conversation,
            "max_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "n": 1,
            "logprobs": True,
        }
        if seed is not None:
            body["seed"] = seed
        if self.extensions:
            body["return_token_ids"] = True
            if allowed is not None:
                if self.guided == "structured_outputs":
                    body["structured_outputs"] = {"choice": list(allowed)}
                else:
                    body["guided_choice"] = list(allowed)
        body.update(self.extra_body)
        return body

    async def _batch(self, bodies: list[dict]) -> list[Generation]:
        tasks = [asyncio.ensure_future(self._request(b)) for b in bodies]
        try:
            return list(await asyncio.gather(*tasks))
        finally:  # a fatal error (RuntimeError) stops the batch's other requests
            for t in tasks:
                t.cancel()

    async def _request(self, body: dict) -> Generation:
        """POST with retries; a Generation, or the error Generation once retries are spent."""
        attempts = self.max_retries + 1
        for attempt in range(attempts):
            try:
                async with self._slots:
                    return await self._post(body)
            except _Retryable as e:
                reason, retry_after = str(e), e.retry_after
            except _Failed as e:
                return self._failed(f"{e} (not retried)")
            if attempt + 1 < attempts:
                delay = min(self.max_backoff, self.backoff * 2**attempt) * random.uniform(0.5, 1.0)
                if retry_after is not None:
                    delay = min(self.max_backoff, max(delay, retry_after))
                await asyncio.sleep(delay)
        return self._failed(f"{reason} (after {attempts} attempts)")

    async def _post(self, body: dict) -> Generation:
        try:
            async with asyncio.timeout(self.timeout):  # the whole attempt, not each read
                r = await self._client.post(self.url, json=body)
        except (TimeoutError, httpx.TimeoutException) as e:
            raise _Retryable(f"timed out after {self.timeout}s ({type(e).__name__})") from None
        except httpx.TransportError as e:
            raise _Retryable(f"connection error: {type(e).__name__}: {e}") from None
        if r.status_code == 200:
            try:
                return _generation(r.json())
            except (ValueError, KeyError, IndexError, TypeError, AttributeError) as e:
                raise _Failed(
                    f"malformed response from {self.url}: {type(e).__name__}: {e}"
                ) from None
        message = f"HTTP {r.status_code} from {self.url}: {_error_message(r)}"
        if r.status_code in FATAL_STATUS:
            raise RuntimeError(message)
        if r.status_code == 429 or r.status_code >= 500:
            raise _Retryable(message, _retry_after(r))
        raise _Failed(message)

    def _failed(self, message: str) -> Generation:
        log.warning("request failed: %s", message)
        with self._errors_lock:
            self.errors.append(message)
        return Generation(text="", finish_reason="error", error=message)


def _generation(data: dict) -> Generation:
    """A Generation from a chat-completion response body."""
    choice = data["choices"][0]
    content = (choice.get("logprobs") or {}).get("content") or []
    return Generation(
        text=content_text((choice.get("message") or {}).get("content")),
        token_ids=[int(t) for t in choice.get("token_ids") or []],
        logprobs=[float(c["logprob"]) for c in content],
        prompt_token_ids=[int(t) for t in data.get("prompt_token_ids") or []],
        finish_reason=choice.get("finish_reason") or "stop",
    )


def _error_message(r: httpx.Response) -> str:
    """The server's error message: OpenAI's {"error": {"message": ...}} or the raw body."""
    try:
        err = r.json().get("error")
        message = err.get("message") if isinstance(err, dict) else err
    except (ValueError, AttributeError):
        message = None
    text = str(message) if message else r.text
    return " ".join(text.split())[:300] or r.reason_phrase


def _retry_after(r: httpx.Response) -> float | None:
    try:
        return max(0.0, float(r.headers["retry-after"]))
    except (KeyError, ValueError):
        return None
