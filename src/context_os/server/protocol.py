"""JSON-RPC 2.0 itself: framing, errors, dispatch to by-name methods with validated params.

``RpcServer`` turns one request line (or a batch) into its answer line; subclasses give it a
method table (name → (params model, function)). Errors: the standard codes for protocol
problems, and a fixed code per class of the library's exception tree (``ERROR_CODES``), with
``data.type`` naming the class (and ``data.index`` / ``data.field`` for malformed messages).
Bad input never crashes the server.

This module knows no method and no transport; it never writes anything itself.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from ..errors import (
    ConfigError,
    ContentTooLarge,
    ContextOSError,
    HashError,
    InputError,
    InvalidOutput,
    LockedObject,
    MalformedMessage,
    NotFound,
    StateError,
    StoreError,
    StoreUnavailable,
)

__all__ = [
    "ERROR_CODES",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "MAX_REQUEST_BYTES",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "SESSION_NOT_OPEN",
    "Params",
    "RpcError",
    "RpcServer",
    "encode",
    "error_object",
    "error_response",
]

log = logging.getLogger("context_os.server")

MAX_REQUEST_BYTES = 32 * 1024 * 1024
"""Default cap on one request (one line, one HTTP body)."""

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
CLOSE_WAIT = 30.0
"""How long a server stopping waits for the call that runs to finish (``RpcServer.quiesced``,
``ContextOsMcp.close``)."""
SESSION_NOT_OPEN = -32020
"""A session method before ``session.open`` for that session on this server."""

ERROR_CODES: tuple[tuple[type[ContextOSError], int], ...] = (
    (ContentTooLarge, -32005),
    (MalformedMessage, -32001),
    (NotFound, -32002),
    (LockedObject, -32003),
    (StoreUnavailable, -32004),
    (InputError, -32006),
    (StateError, -32007),
    (ConfigError, -32008),
    (StoreError, -32009),
    (InvalidOutput, -32010),
    (HashError, -32012),
    (ContextOSError, -32000),
)
"""Library exception → JSON-RPC error code; the first class that matches wins (subclasses first)."""


class RpcError(Exception):
    """A JSON-RPC error to answer with."""

    def __init__(self, code: int, message: str, data: dict[str, Any] | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


def error_object(e: BaseException) -> dict[str, Any]:
    """The JSON-RPC ``error`` member for an exception."""
    if isinstance(e, RpcError):
        out: dict[str, Any] = {"code": e.code, "message": e.message}
        if e.data is not None:
            out["data"] = e.data
        return out
    if isinstance(e, ContextOSError):
        code = next(c for cls, c in ERROR_CODES if isinstance(e, cls))
        data: dict[str, Any] = {"type": type(e).__name__}
        if isinstance(e, MalformedMessage):
            data["index"], data["field"] = e.index, e.field
        return {"code": code, "message": str(e), "data": data}
    return {"code": INTERNAL_ERROR, "message": f"internal error ({type(e).__name__}); see the server log"}


# --- parameters ---------------------------------------------------------------------------------


class Params(BaseModel):
    """A method's by-name parameters: exactly these, strictly typed."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class NoParams(Params):
    pass


def _params_error(e: ValidationError) -> RpcError:
    errors = [
        {"loc": ".".join(str(x) for x in err["loc"]), "msg": err["msg"], "type": err["type"]}
        for err in e.errors(include_url=False, include_input=False, include_context=False)
    ]
    first = errors[0]
    where = f"{first['loc']}: " if first["loc"] else ""
    return RpcError(INVALID_PARAMS, f"invalid params: {where}{first['msg']}", {"errors": errors[:20]})


# --- dispatch -----------------------------------------------------------------------------------

Method = tuple[type[Params], Callable[[Any], Any]]


class RpcServer:
    """Answers JSON-RPC requests with the methods of ``method_table``. Thread-safe: requests run
    one at a time, except those of ``unlocked``: methods that only wait on something thread-safe
    of their own (a long poll), which would otherwise hold up every other client meanwhile."""

    def __init__(
        self,
        method_table: dict[str, Method],
        *,
        max_request_bytes: int = MAX_REQUEST_BYTES,
        unlocked: frozenset[str] = frozenset(),
    ):
        self.max_request_bytes = max_request_bytes
        self._methods = method_table
        self._unlocked = unlocked
        self._lock = threading.Lock()
        self._stopped = False
        """Set by ``quiesced``: a call that would take the lock is refused."""

    @property
    def methods(self) -> list[str]:
        return sorted(self._methods)

    # -- wire ------------------------------------------------------------------------------------

    def too_large(self, *, per_line: bool = True) -> bytes:
        """The answer to a request over the size cap (its id is unknown: it was never parsed);
        ``per_line``: on stdio, where a request is one line."""
        mib = self.max_request_bytes / (1024 * 1024)
        err = RpcError(
            INVALID_REQUEST,
            f"request exceeds the {mib:g} MiB limit" + (" (one request per line)" if per_line else ""),
            {"max_bytes": self.max_request_bytes},
        )
        return encode({"jsonrpc": "2.0", "error": error_object(err), "id": None})

    def handle_line(self, line: bytes) -> bytes | None:
        """One request (or batch) as bytes → the answer as one line of bytes (no newline), or
        None when nothing is to be answered (notifications)."""
        if len(line) > self.max_request_bytes:
            return self.too_large()
        try:
            value = json.loads(line.decode("utf-8"), parse_constant=_no_constants)
        except UnicodeDecodeError as e:
            return encode(error_response(None, RpcError(PARSE_ERROR, f"parse error: not UTF-8 ({e.reason})")))
        except (ValueError, RecursionError) as e:
            return encode(error_response(None, RpcError(PARSE_ERROR, f"parse error: {_short(e)}")))
        answer = self.handle(value)
        return None if answer is None else encode(answer)

    def handle(self, value: Any) -> Any:
        """A parsed request (or batch) → the response object(s), or None."""
        if isinstance(value, list):
            if not value:
                return error_response(None, RpcError(INVALID_REQUEST, "invalid request: empty batch"))
            answers = [a for a in (self._one(v) for v in value) if a is not None]
            return answers or None
        return self._one(value)

    def _one(self, req: Any) -> dict[str, Any] | None:
        if not isinstance(req, dict):
            return error_response(None, RpcError(INVALID_REQUEST, "invalid request: not a JSON object"))
        notification = "id" not in req
        rid = req.get("id")
        if not (rid is None or isinstance(rid, str) or (isinstance(rid, int) and not isinstance(rid, bool))):
            return error_response(
                None, RpcError(INVALID_REQUEST, "invalid request: id must be a string, an integer or null")
            )
        # an object that is no request is no notification either: it is answered (its id, or
        # null), or its sender could not tell that nothing ran
        method = req.get("method")
        if req.get("jsonrpc") != "2.0":
            return error_response(rid, RpcError(INVALID_REQUEST, 'invalid request: "jsonrpc" must be "2.0"'))
        if not isinstance(method, str):
            return error_response(rid, RpcError(INVALID_REQUEST, "invalid request: method must be a string"))
        try:
            params = req.get("params", {})
            if not isinstance(params, dict):
                raise RpcError(INVALID_PARAMS, "invalid params: params must be an object (by-name parameters)")
            log.debug("request %r (id %r)", method, rid)
            result = self.call(method, params)
        except Exception as e:
            if not isinstance(e, RpcError | ContextOSError):
                log.exception("request %r failed", req.get("method"))
            else:
                log.info("request %r: %s", req.get("method"), e)
            return None if notification else error_response(rid, e)
        return None if notification else {"jsonrpc": "2.0", "result": result, "id": rid}

    def call(self, method: str, params: dict[str, Any]) -> Any:
        """Run one method with by-name params (raises ``RpcError`` or library errors)."""
        entry = self._methods.get(method)
        if entry is None:
            raise RpcError(METHOD_NOT_FOUND, f"method not found: {method!r}", {"methods": self.methods})
        model, fn = entry
        try:
            parsed = model.model_validate(params)
        except ValidationError as e:
            raise _params_error(e) from None
        with contextlib.nullcontext() if method in self._unlocked else self._lock:
            if self._stopped and method not in self._unlocked:
                raise StateError(f"the server is stopping: {method} is not run")
            try:
                return fn(parsed)
            except RecursionError:
                raise RpcError(INVALID_PARAMS, "invalid params: nested too deeply") from None

    @contextlib.contextmanager
    def quiesced(self, wait: float) -> Iterator[None]:
        """Within: no call runs (but those of ``unlocked``) and none will: the one running has
        finished, waited for at most ``wait`` seconds (then a warning: it may fail as what it uses
        closes), and a call asked meanwhile (waiting for the lock) or later answers that the
        server is stopping (``StateError``). Ctrl-C during that wait (asked again) ends the wait,
        not what runs within."""
        self._stopped = True
        with when_done(self._lock, wait, "stopping", "the call"):
            yield


@contextlib.contextmanager
def when_done(lock: threading.Lock, wait: float, doing: str, call: str, logger: logging.Logger = log) -> Iterator[None]:
    """Within: ``lock`` held, taken once the call that holds it (``call``, said in warnings, as
    what the server is ``doing``) has finished, waited for at most ``wait`` seconds; then, or
    if Ctrl-C comes during that wait (asked again), without it (a warning: that call may fail as
    what it uses closes): a stop's clean-up runs within all the same."""
    try:
        finished = lock.acquire(timeout=wait)
    except KeyboardInterrupt:
        finished = False
        logger.warning("%s at once, asked again: %s that runs may fail", doing, call)
    else:
        if not finished:
            logger.warning("%s while %s still runs after %g s: it may fail", doing, call, wait)
    try:
        yield
    finally:
        if finished:
            lock.release()


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _short(e: BaseException) -> str:
    if isinstance(e, RecursionError):
        return "nested too deeply"
    return str(e)[:200]


def error_response(rid: Any, e: BaseException) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "error": error_object(e), "id": rid}


def encode(answer: Any) -> bytes:
    """One line of JSON. Text the input smuggled in that is not valid Unicode (lone surrogates)
    goes out escaped rather than failing the answer."""
    try:
        return json.dumps(answer, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(answer, ensure_ascii=True, separators=(",", ":"), allow_nan=False).encode("ascii")
    except (TypeError, ValueError, RecursionError):
        log.exception("cannot encode an answer")
        rid = answer.get("id") if isinstance(answer, dict) else None
        err = {"code": INTERNAL_ERROR, "message": "internal error: the answer could not be encoded as JSON"}
        return json.dumps({"jsonrpc": "2.0", "error": err, "id": rid}).encode("ascii")
