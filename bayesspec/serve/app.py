"""A small OpenAI-compatible HTTP/1.1 server over :class:`~bayesspec.serve.live.LiveEngine`.

Endpoints (as vLLM serves them): ``POST /v1/completions`` and ``POST /v1/chat/completions``
(streaming as server-sent events with ``stream: true``, ``stream_options.include_usage``
and ``continuous_usage_stats`` honoured; otherwise one JSON document), ``GET /v1/models``,
``GET /health``, ``GET /metrics``. Standard library only (asyncio streams): the request
handling is a few hundred microseconds a request, far below the simulated step times, and
needs no web framework. It binds 127.0.0.1 only.

The engine generates exactly ``max_tokens`` tokens (there is no model, hence no EOS; load
generators send ``ignore_eos`` anyway). Prompt length: ``fixed_prompt_tokens`` when set
(load tests with synthetic data of a known length), else a token-id list's length, else
the text's UTF-8 bytes / ``bytes_per_token`` (about 4 for English BPE vocabularies).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid

from bayesspec.errors import BadInput

from bayesspec.serve.live import LiveEngine, LiveRequest
from bayesspec.serve.metrics import CONTENT_TYPE_LATEST, ServerMetrics

__all__ = ["SimulatedServer", "HOST"]

HOST = "127.0.0.1"
MAX_BODY = 64 * 1024 * 1024
_WORDS = ("the", "model", "said", "one", "more", "token", "and", "then", "a", "step")
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            411: "Length Required", 413: "Payload Too Large", 500: "Internal Server Error"}


class _HTTPError(Exception):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind


class SimulatedServer:
    """Engine + metrics + HTTP. ``await start()`` binds (``port=0``: any free port,
    read back from :attr:`port`), ``await stop()`` closes."""

    def __init__(self, setup, *, model_name: str | None = None, port: int = 8000,
                 time_scale: float = 1.0, seed: int = 0, fixed_prompt_tokens: int | None = None,
                 bytes_per_token: float = 4.0, default_max_tokens: int = 16,
                 log=sys.stderr):
        self.setup = setup
        self.model_name = model_name or setup.verifier
        self.metrics = ServerMetrics(self.model_name, k=setup.spec.k)
        self.engine = LiveEngine(setup, time_scale=time_scale, seed=seed, metrics=self.metrics)
        self.port = int(port)
        self.fixed_prompt_tokens = fixed_prompt_tokens
        self.bytes_per_token = float(bytes_per_token)
        self.default_max_tokens = int(default_max_tokens)
        self.log = log
        self.started = time.time()
        self._server: asyncio.AbstractServer | None = None
        self._engine_task: asyncio.Task | None = None
        self._connections: set[asyncio.Task] = set()

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self._engine_task = asyncio.create_task(self.engine.run())
        try:
            self._server = await asyncio.start_server(self._connection, HOST, self.port,
                                                      limit=1 << 20, backlog=1024)
        except OSError as error:
            self.engine.stop()
            raise BadInput(f"cannot listen on {HOST}:{self.port}: {error.strerror or error}",
                           argument="port") from None
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        self.engine.stop()
        if self._engine_task is not None:
            try:
                await asyncio.wait_for(self._engine_task, 2.0)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                self._engine_task.cancel()
        if self._server is not None:
            try:
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
            except asyncio.TimeoutError:
                pass

    # ------------------------------------------------------------------ HTTP plumbing
    async def _connection(self, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._connections.add(task)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                        ConnectionError):
                    return
                keep_alive = await self._request(head, reader, writer)
                if not keep_alive:
                    return
        except (ConnectionError, asyncio.CancelledError):
            return
        finally:
            self._connections.discard(task)
            try:
                writer.close()
            except Exception:  # noqa: BLE001 - the peer may be gone already
                pass

    async def _request(self, head: bytes, reader, writer) -> bool:
        lines = head.decode("latin-1").split("\r\n")
        try:
            method, target, version = lines[0].split(" ", 2)
        except ValueError:
            await self._send_json(writer, 400, _error_body("malformed request line"), False)
            return False
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                name, value = line.split(":", 1)
                headers[name.strip().lower()] = value.strip()
        keep_alive = version.upper() == "HTTP/1.1" and \
            headers.get("connection", "").lower() != "close"
        body = b""
        if "chunked" in headers.get("transfer-encoding", "").lower():
            await self._send_json(writer, 411, _error_body("send a Content-Length"), False)
            return False
        length = headers.get("content-length")
        if length:
            try:
                size = int(length)
            except ValueError:
                await self._send_json(writer, 400, _error_body("bad Content-Length"), False)
                return False
            if size < 0 or size > MAX_BODY:
                await self._send_json(writer, 413, _error_body("request body too large"),
                                      False)
                return False
            body = await reader.readexactly(size)
        path = target.split("?", 1)[0]
        try:
            return await self._route(method.upper(), path, body, writer, keep_alive)
        except _HTTPError as error:
            await self._send_json(writer, error.status,
                                  _error_body(error.message, error.kind, error.status),
                                  keep_alive)
            return keep_alive

    async def _route(self, method, path, body, writer, keep_alive) -> bool:
        posts = {"/v1/completions": False, "/v1/chat/completions": True}
        gets = ("/health", "/metrics", "/v1/models", "/ping")
        if path in posts:
            if method != "POST":
                raise _HTTPError(405, f"use POST for {path}")
            return await self._generate(body, writer, keep_alive, chat=posts[path])
        if path not in gets:
            raise _HTTPError(404, f"no route {path}", "not_found_error")
        if method not in ("GET", "HEAD"):
            raise _HTTPError(405, f"use GET for {path}")
        if path in ("/health", "/ping"):
            await self._send(writer, 200, b"", "application/json", keep_alive)
        elif path == "/metrics":
            await self._send(writer, 200, self.metrics.exposition(), CONTENT_TYPE_LATEST,
                             keep_alive)
        else:
            doc = {"object": "list", "data": [{
                "id": self.model_name, "object": "model", "created": int(self.started),
                "owned_by": "bayesspec", "root": self.model_name, "parent": None,
                "max_model_len": self.engine.max_request_tokens()}]}
            await self._send_json(writer, 200, doc, keep_alive)
        return keep_alive

    @staticmethod
    async def _send(writer, status: int, payload: bytes, content_type: str,
                    keep_alive: bool) -> None:
        head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
                f"content-type: {content_type}\r\ncontent-length: {len(payload)}\r\n"
                f"connection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n")
        writer.write(head.encode("latin-1") + payload)
        await writer.drain()

    async def _send_json(self, writer, status: int, doc: dict, keep_alive: bool) -> None:
        await self._send(writer, status, json.dumps(doc).encode(), "application/json",
                         keep_alive)

    # ------------------------------------------------------------------ generation
    def _prompt_tokens(self, doc: dict, chat: bool) -> int:
        if chat:
            messages = doc.get("messages")
            if not isinstance(messages, list) or not messages:
                raise _HTTPError(400, "'messages' must be a non-empty list")
            text = " ".join(_message_text(m) for m in messages)
            count = None
        else:
            prompt = doc.get("prompt")
            if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
                count, text = len(prompt), ""
            elif isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
                count, text = None, prompt[0]
            elif isinstance(prompt, str):
                count, text = None, prompt
            else:
                raise _HTTPError(400, "'prompt' must be a string or a list of token ids")
        if self.fixed_prompt_tokens:
            return int(self.fixed_prompt_tokens)
        if count is not None:
            return count
        return max(1, int(round(len(text.encode("utf-8")) / self.bytes_per_token)))

    def _max_tokens(self, doc: dict) -> int:
        for key in ("max_completion_tokens", "max_tokens"):
            value = doc.get(key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise _HTTPError(400, f"'{key}' must be a positive integer")
            return value
        return self.default_max_tokens

    async def _generate(self, body: bytes, writer, keep_alive: bool, *, chat: bool) -> bool:
        try:
            doc = json.loads(body or b"null")
        except (ValueError, RecursionError):
            raise _HTTPError(400, "the body is not JSON") from None
        if not isinstance(doc, dict):
            raise _HTTPError(400, "the body must be a JSON object")
        model = doc.get("model")
        if model not in (None, "", self.model_name):
            raise _HTTPError(404, f"The model `{model}` does not exist.", "NotFoundError")
        n = doc.get("n", 1)
        if n not in (None, 1):
            raise _HTTPError(400, "only n = 1 is simulated")
        prompt = self._prompt_tokens(doc, chat)
        output = self._max_tokens(doc)
        stream = bool(doc.get("stream"))
        options = doc.get("stream_options") or {}
        include_usage = bool(options.get("include_usage")) if isinstance(options, dict) else False
        continuous = bool(options.get("continuous_usage_stats")) \
            if isinstance(options, dict) else False

        queue: asyncio.Queue = asyncio.Queue()
        request = LiveRequest(prompt=prompt, output=output,
                              notify=lambda new, done: queue.put_nowait((new, done)))
        try:
            self.engine.submit(request)
        except BadInput as error:
            raise _HTTPError(400, error.reason) from None
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        created = int(time.time())
        try:
            if stream:
                await self._stream(writer, queue, request, rid, created, chat, include_usage,
                                   continuous)
            else:
                produced = 0
                while True:
                    new, done = await queue.get()
                    produced += new
                    if done:
                        break
                self._finished(request)
                await self._send_json(writer, 200, _full_response(
                    rid, created, self.model_name, chat, _text(0, produced),
                    _usage(prompt, produced)), keep_alive)
        except (ConnectionError, asyncio.CancelledError):
            self.engine.abort(request)
            raise
        finally:
            if not request.done:
                self.engine.abort(request)
        return keep_alive

    async def _stream(self, writer, queue, request, rid, created, chat, include_usage,
                      continuous) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
                     b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n"
                     b"connection: keep-alive\r\n\r\n")
        kind = "chat.completion.chunk" if chat else "text_completion"

        def event(choices, usage=None):
            doc = {"id": rid, "object": kind, "created": created, "model": self.model_name,
                   "choices": choices}
            if include_usage:
                doc["usage"] = usage
            return _chunk(b"data: " + json.dumps(doc).encode() + b"\n\n")

        if chat:   # vLLM opens a chat stream with the assistant role and empty content
            writer.write(event([{"index": 0, "delta": {"role": "assistant", "content": ""},
                                 "logprobs": None, "finish_reason": None}],
                               _usage(request.prompt, 0) if continuous else None))
            await writer.drain()
        produced = 0
        while True:
            new, done = await queue.get()
            # Several steps may have completed while this handler waited: send them as
            # one event, as a server does when its output queue holds several outputs.
            while not done and not queue.empty():
                more, done = queue.get_nowait()
                new += more
            text = _text(produced, new)
            produced += new
            reason = "length" if done else None
            if chat:
                choice = {"index": 0, "delta": {"content": text}, "logprobs": None,
                          "finish_reason": reason}
            else:
                choice = {"index": 0, "text": text, "logprobs": None,
                          "finish_reason": reason, "stop_reason": None}
            writer.write(event([choice], _usage(request.prompt, produced) if continuous
                               else None))
            await writer.drain()
            if done:
                break
        self._finished(request)
        if include_usage:
            writer.write(event([], _usage(request.prompt, produced)))
        writer.write(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()

    def _finished(self, request: LiveRequest) -> None:
        if request.finish is None or request.first_token is None:
            return
        self.metrics.finished(request.prompt, request.generated,
                              request.finish - request.arrival,
                              request.first_token - request.arrival)


def _chunk(payload: bytes) -> bytes:
    return f"{len(payload):x}\r\n".encode() + payload + b"\r\n"


def _text(start: int, count: int) -> str:
    return "".join(" " + _WORDS[(start + i) % len(_WORDS)] for i in range(count))


def _usage(prompt: int, completion: int) -> dict:
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}


def _message_text(message) -> str:
    if not isinstance(message, dict):
        raise _HTTPError(400, "each message must be an object")
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(part.get("text", "") for part in content
                        if isinstance(part, dict) and isinstance(part.get("text"), str))
    if content is None:
        return ""
    raise _HTTPError(400, "message content must be a string or a list of parts")


def _full_response(rid, created, model, chat, text, usage) -> dict:
    if chat:
        choice = {"index": 0, "message": {"role": "assistant", "content": text},
                  "logprobs": None, "finish_reason": "length"}
        kind = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length",
                  "stop_reason": None}
        kind = "text_completion"
    return {"id": rid, "object": kind, "created": created, "model": model,
            "choices": [choice], "usage": usage}


def _error_body(message: str, kind: str = "invalid_request_error", code: int = 400) -> dict:
    return {"object": "error", "message": message, "type": kind, "param": None, "code": code}
