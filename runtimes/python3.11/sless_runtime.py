"""sless HTTP wrapper for Python functions (runtime python3.11).

Loads the user's entrypoint (``module.function``) once at start, then calls it
with one ``event`` dict per HTTP request and turns its return value into the
HTTP response. The contract is described in runtimes/README.md.

Configuration (environment):
  SLESS_LISTEN_FD   a listening TCP socket the process inherited, to serve on
                    (how the local driver starts it: the socket is sless's)
  SLESS_PORT        port to listen on (required without SLESS_LISTEN_FD)
  SLESS_HOST        address to listen on (default 127.0.0.1)
  SLESS_CODE_DIR    directory with the user's files (required); first on sys.path
  SLESS_DEPS_DIR    optional directory of installed requirements; on sys.path
                    after the code directory when it exists
  SLESS_ENTRYPOINT  module.function; the module part may be dotted

Exit codes: 0 after SIGTERM/SIGINT, 2 bad configuration, 3 the entrypoint
could not be imported or is not callable, 4 the port could not be bound.

Job mode (``sless_runtime.py --job``, or SLESS_JOB=1): no port; the event is
read as JSON from the file SLESS_JOB_EVENT_FILE names when it is set, else
from stdin, the function is called once, its return value is written to
stdout as one line of JSON, and the wrapper exits 0 (1 when the function
raised).

Pool mode (``sless_runtime.py --pool``): started ahead of any function,
with this module and what it imports loaded. The process reads one line of
JSON from stdin, ``{"env": {...}, "job": false}``, adds ``env`` to its
environment, and goes on as a process started with that environment (with
``"job": true``, in job mode, its event being the rest of stdin when
SLESS_JOB_EVENT_FILE is not set). End of input before the line: it exits 0.

Output: a line the function writes to sys.stdout or sys.stderr while serving
a call whose request carried a ``Sless-Invocation-Id`` is written as
``\x1e<id>\x1f<line>``, or ``\x1e<id>;<traceparent>\x1f<line>`` when it
came with a ``traceparent`` (see "Output and the call that printed it" in
runtimes/README.md).

Standard library only.
"""

import contextlib
import contextvars
import http.server
import importlib
import json
import os
import re
import signal
import socket
import sys
import threading
import time
import traceback
from urllib.parse import parse_qsl, urlsplit

RESERVED_PREFIX = "/__sless/"
HEALTH_PATH = "/__sless/health"
SHUTDOWN_GRACE_SECONDS = 5.0

EXIT_CONFIG = 2
EXIT_ENTRYPOINT = 3
EXIT_LISTEN = 4

# Status codes whose responses never carry a body (RFC 9110 section 6.4.1).
# A Content-Length header is not sent for 204 and 304 either.
_NO_BODY_STATUSES = (204, 304)

# Response headers the wrapper controls itself; values set by the function are
# ignored so that the message framing stays correct.
_FRAMING_HEADERS = ("content-length", "transfer-encoding", "connection")

# Output and the call that printed it (runtimes/README.md): a line written
# while serving the call named by INVOCATION_HEADER is written as
# MARK + id + MARK_END + the line + "\n"; the id is followed by ";" and the
# call's traceparent when its request has one, well formed.
INVOCATION_HEADER = "Sless-Invocation-Id"
MARK = "\x1e"
MARK_END = "\x1f"
# A call's line still without its newline is written as a line of its own
# once it is longer than this (in characters).
PARTIAL_LINE_LIMIT = 16 * 1024
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}\Z")


def _log(message):
    try:
        sys.stderr.write(message + "\n")
        sys.stderr.flush()
    except Exception:
        pass


class BadRequest(Exception):
    """The request could not be read (malformed body framing)."""


class InvalidResponse(Exception):
    """The function returned a value that cannot be turned into a response."""


# ---------------------------------------------------------------------------
# Configuration and loading
# ---------------------------------------------------------------------------


def _fail(code, message):
    _log("sless: " + message)
    sys.exit(code)


def _listen_fd():
    """The inherited listening socket ``SLESS_LISTEN_FD`` names, or None."""
    text = os.environ.get("SLESS_LISTEN_FD", "").strip()
    if not text:
        return None
    try:
        fd = int(text)
    except ValueError:
        fd = -1
    if fd < 0:
        _fail(EXIT_CONFIG, "SLESS_LISTEN_FD %r is not a file descriptor" % text)
    return fd


def _read_config(job=False):
    port_text = os.environ.get("SLESS_PORT", "").strip()
    host = os.environ.get("SLESS_HOST", "").strip() or "127.0.0.1"
    code_dir = os.environ.get("SLESS_CODE_DIR", "").strip()
    deps_dir = os.environ.get("SLESS_DEPS_DIR", "").strip()
    entrypoint = os.environ.get("SLESS_ENTRYPOINT", "").strip()

    port = None
    if not job and _listen_fd() is None:
        if not port_text:
            _fail(EXIT_CONFIG, "SLESS_PORT is not set")
        try:
            port = int(port_text)
        except ValueError:
            port = -1
        if not 0 <= port <= 65535:
            _fail(EXIT_CONFIG, "SLESS_PORT %r is not a port number" % port_text)
    if not code_dir:
        _fail(EXIT_CONFIG, "SLESS_CODE_DIR is not set")
    if not os.path.isdir(code_dir):
        _fail(EXIT_CONFIG, "SLESS_CODE_DIR %r is not a directory" % code_dir)
    if not entrypoint:
        _fail(EXIT_CONFIG, "SLESS_ENTRYPOINT is not set")
    return host, port, os.path.abspath(code_dir), deps_dir, entrypoint


def _setup_sys_path(code_dir, deps_dir):
    # The wrapper's own directory must not shadow or expose modules to the
    # user's code.
    own_dir = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != own_dir]
    entries = [code_dir]
    if deps_dir and os.path.isdir(deps_dir):
        entries.append(os.path.abspath(deps_dir))
    for entry in reversed(entries):
        if entry in sys.path:
            sys.path.remove(entry)
        sys.path.insert(0, entry)


def load_entrypoint(entrypoint):
    """Import ``module.function`` and return the callable.

    Exits with code 3 (traceback on stderr) when the entrypoint is malformed,
    the module cannot be imported, the attribute is missing or not callable.
    """
    module_name, _, attr = entrypoint.rpartition(".")
    if not module_name or not attr:
        _fail(
            EXIT_ENTRYPOINT,
            "entrypoint %r is not of the form module.function" % entrypoint,
        )
    try:
        module = importlib.import_module(module_name)
        func = getattr(module, attr)
    except BaseException:  # noqa: B902 - the import may raise anything, even SystemExit
        traceback.print_exc(file=sys.stderr)
        _fail(EXIT_ENTRYPOINT, "cannot load entrypoint %r" % entrypoint)
    if not callable(func):
        _fail(
            EXIT_ENTRYPOINT,
            "entrypoint %r is a %s, not a function" % (entrypoint, type(func).__name__),
        )
    return func


# ---------------------------------------------------------------------------
# Request -> event, return value -> response
# ---------------------------------------------------------------------------


def _is_ascii_digits(text):
    return bool(text) and all("0" <= c <= "9" for c in text)


def _reject_constant(name):
    # NaN, Infinity and -Infinity are not JSON: such a body has no `json`.
    raise ValueError("not JSON: %s" % name)


def _json_bytes(value):
    # Raises TypeError/ValueError for values JSON cannot represent; the caller
    # reports that like an exception in the function.
    return json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")


def _has_header(headers, name):
    name = name.lower()
    return any(k.lower() == name for k, _ in headers)


def _normalise_headers(raw):
    """Turn the function's ``headers`` value into a list of (name, value)."""
    if raw is None:
        return []
    if not isinstance(raw, dict):
        raise InvalidResponse(
            "'headers' must be a dict, not %s" % type(raw).__name__
        )
    result = []
    for name, value in raw.items():
        if not isinstance(name, str) or not name or any(
            c in name for c in "\r\n: \t"
        ):
            raise InvalidResponse("invalid header name %r" % (name,))
        if name.lower() in _FRAMING_HEADERS:
            continue
        values = value if isinstance(value, (list, tuple)) else [value]
        for v in values:
            if v is None:
                continue
            text = v if isinstance(v, str) else (
                json.dumps(v) if isinstance(v, bool) else str(v)
            )
            if "\r" in text or "\n" in text:
                raise InvalidResponse("invalid value for header %r" % name)
            result.append((name, text))
    return result


def _status_code(raw):
    if isinstance(raw, bool):
        raise InvalidResponse("'statusCode' must be an integer, not bool")
    if isinstance(raw, str) and _is_ascii_digits(raw.strip()):
        raw = int(raw.strip())
    if not isinstance(raw, int):
        raise InvalidResponse(
            "'statusCode' must be an integer, not %s" % type(raw).__name__
        )
    if not 200 <= raw <= 599:
        raise InvalidResponse("'statusCode' %d is outside 200..599" % raw)
    return raw


def build_response(result):
    """Map the function's return value to (status, [(name, value)], body bytes)."""
    if isinstance(result, str):
        return 200, [("Content-Type", "text/plain; charset=utf-8")], result.encode("utf-8")
    if isinstance(result, (bytes, bytearray, memoryview)):
        return 200, [("Content-Type", "application/octet-stream")], bytes(result)
    if result is None:
        return 204, [], b""
    if isinstance(result, dict) and "statusCode" in result:
        status = _status_code(result["statusCode"])
        headers = _normalise_headers(result.get("headers"))
        body = result.get("body")
        if body is None:
            data = b""
        elif isinstance(body, str):
            data = body.encode("utf-8")
            if not _has_header(headers, "content-type"):
                headers.append(("Content-Type", "text/plain; charset=utf-8"))
        elif isinstance(body, (bytes, bytearray, memoryview)):
            data = bytes(body)
            if not _has_header(headers, "content-type"):
                headers.append(("Content-Type", "application/octet-stream"))
        else:
            data = _json_bytes(body)
            if not _has_header(headers, "content-type"):
                headers.append(("Content-Type", "application/json"))
        return status, headers, data
    # Any other dict, a list, or a scalar (int, float, bool): JSON.
    return 200, [("Content-Type", "application/json")], _json_bytes(result)


def error_response(exc, tb_text):
    try:
        message = str(exc)
    except Exception:
        message = repr(exc)
    body = {
        "error": type(exc).__name__,
        "message": message,
        "traceback": tb_text,
    }
    data = json.dumps(body, ensure_ascii=False, default=str).encode("utf-8")
    return 500, [("Content-Type", "application/json")], data


def _format_user_traceback(exc):
    tb = exc.__traceback__
    # Drop the wrapper's own frame (the call site) when the exception came
    # from inside the user's code.
    if tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


# ---------------------------------------------------------------------------
# Output and the call that printed it
# ---------------------------------------------------------------------------


class _Call:
    """A call being served whose request named it: its lines are marked with
    ``id``. ``ended`` once it is answered: text its code writes later (from
    a thread it left running) is not held back any more."""

    __slots__ = ("id", "ended")

    def __init__(self, invocation_id):
        self.id = invocation_id
        self.ended = False


# The call the running code serves. Set by the thread that serves the
# request; asyncio tasks the function starts inherit it, threads it starts
# do not (their lines stay unmarked rather than risk another call's id).
_current_call = contextvars.ContextVar("sless_current_call", default=None)


def _invocation_id(values):
    """The id a request's Sless-Invocation-Id names, lowercase, or None
    unless there is exactly one such header and it is a UUID."""
    if not values or len(values) != 1:
        return None
    value = values[0].strip().lower()
    return value if _UUID.match(value) else None


class _CallOutput:
    """Stands in for sys.stdout or sys.stderr. Text the code serving a call
    writes is held until its line ends, then written as one marked line:
    lines of concurrent calls never mix. Other text passes through as it
    is. Everything else (``buffer``, ``fileno()``, ``flush()``,
    ``encoding``, ...) is the stream's.

    Also remembers whether the last text written ended a line, so that a
    marked line, and a job's result, start on a line of their own."""

    def __init__(self, stream):
        self._stream = stream
        # Held around each write to the stream: a line goes out whole,
        # whichever thread writes it.
        self._lock = threading.RLock()
        # _Call -> the start of its current line.
        self._held = {}
        self.at_line_start = True

    def write(self, text):
        call = _current_call.get()
        if call is None:
            with self._lock:
                written = self._stream.write(text)
                if text:
                    self.at_line_start = text.endswith("\n")
            return written
        if not isinstance(text, str):
            raise TypeError("write() argument must be str, not %s" % type(text).__name__)
        with self._lock:
            lines = (self._held.pop(call, "") + text).split("\n")
            rest = lines.pop()
            if rest and (call.ended or len(rest) > PARTIAL_LINE_LIMIT):
                lines.append(rest)
            elif rest:
                self._held[call] = rest
            self._write_marked(call.id, lines)
        return len(text)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def end_call(self, call):
        """Writes what ``call`` left of a line, with a newline added."""
        with self._lock:
            rest = self._held.pop(call, "")
            self._write_marked(call.id, [rest] if rest else [])

    def _write_marked(self, call_id, lines):
        if not lines:
            return
        text = "".join(MARK + call_id + MARK_END + line + "\n" for line in lines)
        if not self.at_line_start:
            # Text written outside any call left its line open: end it, so
            # that the mark starts a line.
            text = "\n" + text
        self._stream.write(text)
        self.at_line_start = True

    def __getattr__(self, name):
        return getattr(self._stream, name)


# The _CallOutput objects standing in for sys.stdout and sys.stderr.
_outputs = []


def _install_outputs():
    """Puts a _CallOutput in place of sys.stdout and sys.stderr (once);
    returns the one for stdout."""
    if not _outputs:
        sys.stdout = _CallOutput(sys.stdout)
        sys.stderr = _CallOutput(sys.stderr)
        _outputs.extend((sys.stdout, sys.stderr))
    return _outputs[0]


@contextlib.contextmanager
def _serving_call(headers):
    """What is written inside is the call's that ``headers`` name (if they
    name one); at the end, the lines it left open are written."""
    invocation_id = _invocation_id(headers.get_all(INVOCATION_HEADER))
    if invocation_id is None:
        yield
        return
    traceparent = headers.get_all("traceparent") or []
    if len(traceparent) == 1 and _TRACEPARENT.match(traceparent[0].strip()):
        invocation_id += ";" + traceparent[0].strip()
    call = _Call(invocation_id)
    token = _current_call.set(call)
    try:
        yield
    finally:
        _current_call.reset(token)
        call.ended = True
        for output in _outputs:
            output.end_call(call)


# ---------------------------------------------------------------------------
# HTTP server
# ---------------------------------------------------------------------------


class _InFlight:
    """Counts requests being handled, so shutdown can wait for them."""

    def __init__(self):
        self._count = 0
        self._cond = threading.Condition()

    def __enter__(self):
        with self._cond:
            self._count += 1

    def __exit__(self, *exc_info):
        with self._cond:
            self._count -= 1
            self._cond.notify_all()

    def wait_idle(self, timeout):
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._count > 0:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True


class RuntimeServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address, handler_class, func, listen_fd=None):
        self.func = func
        self.in_flight = _InFlight()
        if listen_fd is None:
            if ":" in address[0]:
                self.address_family = socket.AF_INET6
            super().__init__(address, handler_class)
            return
        # A socket bound and listening already, handed over by whoever
        # started this process: serve on it as it is.
        inherited = socket.socket(fileno=listen_fd)
        if inherited.type != socket.SOCK_STREAM:
            raise OSError("SLESS_LISTEN_FD %d is not a stream socket" % listen_fd)
        self.address_family = inherited.family
        super().__init__(inherited.getsockname()[:2], handler_class, bind_and_activate=False)
        self.socket.close()
        self.socket = inherited
        self.server_address = inherited.getsockname()
        self.socket.listen(self.request_queue_size)

    def handle_error(self, request, client_address):
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return
        _log("sless: error while handling a connection from %s:" % (client_address,))
        traceback.print_exc(file=sys.stderr)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # The head and the body go out in two writes; with Nagle on, the body
    # waits for the client's delayed ACK of the head (about 40 ms) on every
    # keep-alive response.
    disable_nagle_algorithm = True
    server_version = "sless-python3.11"
    # Idle keep-alive connections (and stalled uploads) are closed after this
    # many seconds; the time the function runs does not count.
    timeout = 300

    # Every method (GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS, ...) is
    # served by the same code: BaseHTTPRequestHandler looks up do_<METHOD>.
    def __getattr__(self, name):
        if name.startswith("do_"):
            return self._serve
        raise AttributeError(name)

    def version_string(self):
        return self.server_version

    # Access logging is done by _serve, one line per request.
    def log_request(self, code="-", size="-"):
        pass

    def log_error(self, format, *args):
        if format.startswith("Request timed out"):
            return
        self.log_message(format, *args)

    def log_message(self, format, *args):
        _log("sless: %s %s" % (self.address_string(), format % args))

    # -- reading -----------------------------------------------------------

    def _read_exact(self, n):
        chunks = []
        remaining = n
        while remaining > 0:
            chunk = self.rfile.read(remaining)
            if not chunk:
                raise BadRequest("request body ended early")
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)

    def _read_chunked(self):
        parts = []
        while True:
            line = self.rfile.readline(65537)
            if not line or not line.endswith(b"\n"):
                raise BadRequest("malformed chunk size line")
            size_text = line.split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise BadRequest("malformed chunk size %r" % size_text) from None
            if size < 0:
                raise BadRequest("negative chunk size")
            if size == 0:
                break
            parts.append(self._read_exact(size))
            if self._read_exact(2) != b"\r\n":
                raise BadRequest("chunk not followed by CRLF")
        # Trailer section: header lines up to an empty line.
        while True:
            line = self.rfile.readline(65537)
            if not line:
                raise BadRequest("request body ended early")
            if line in (b"\r\n", b"\n"):
                break
        return b"".join(parts)

    def _read_body(self):
        encoding = self.headers.get("Transfer-Encoding")
        if encoding is not None:
            codings = [c.strip().lower() for c in encoding.split(",") if c.strip()]
            if codings != ["chunked"]:
                raise BadRequest("unsupported Transfer-Encoding %r" % encoding)
            return self._read_chunked()
        length_values = self.headers.get_all("Content-Length") or []
        if not length_values:
            return b""
        lengths = {v.strip() for v in length_values}
        if len(lengths) != 1 or not _is_ascii_digits(next(iter(lengths))):
            raise BadRequest("invalid Content-Length")
        return self._read_exact(int(next(iter(lengths))))

    def _event(self, path, query, body):
        headers = {}
        for name, value in self.headers.items():
            key = name.lower()
            headers[key] = headers[key] + ", " + value if key in headers else value
        text = body.decode("utf-8", errors="replace")
        parsed = None
        if text.strip():
            try:
                parsed = json.loads(text, parse_constant=_reject_constant)
            except (ValueError, RecursionError):
                parsed = None
        return {
            "method": self.command,
            "path": path,
            "query": dict(parse_qsl(query, keep_blank_values=True)),
            "headers": headers,
            "body": text,
            "json": parsed,
        }

    # -- writing -----------------------------------------------------------

    def _send(self, status, headers, body):
        if status in _NO_BODY_STATUSES:
            body = b""
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        if status not in _NO_BODY_STATUSES:
            self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)
        self.wfile.flush()

    def _send_json(self, status, value):
        data = json.dumps(value).encode("utf-8")
        self._send(status, [("Content-Type", "application/json")], data)

    def _failure(self, exc, tb_text):
        _log("sless: %s %s raised:" % (self.command, urlsplit(self.path).path or "/"))
        sys.stderr.write(tb_text)
        sys.stderr.flush()
        return error_response(exc, tb_text)

    # -- dispatch ----------------------------------------------------------

    def _serve(self):
        started = time.monotonic()
        target = urlsplit(self.path)
        path = target.path or "/"
        status = 500
        with self.server.in_flight:
            try:
                status = self._respond(path, target.query)
            except (ConnectionError, TimeoutError):
                self.close_connection = True
                status = "-"
            finally:
                elapsed_ms = (time.monotonic() - started) * 1000.0
                _log("%s %s %s %.2fms" % (self.command, path, status, elapsed_ms))

    def _respond(self, path, query):
        try:
            body = self._read_body()
        except BadRequest as exc:
            self.close_connection = True
            self._send_json(400, {"error": "BadRequest", "message": str(exc)})
            return 400

        if path.startswith(RESERVED_PREFIX):
            if path != HEALTH_PATH:
                self._send_json(404, {"error": "NotFound", "message": "no such path %s" % path})
                return 404
            if self.command not in ("GET", "HEAD"):
                self._send(
                    405,
                    [("Allow", "GET, HEAD"), ("Content-Type", "application/json")],
                    json.dumps({"error": "MethodNotAllowed", "message": "use GET"}).encode("utf-8"),
                )
                return 405
            self._send_json(200, _health_document())
            return 200

        event = self._event(path, query, body)
        # The failure's traceback is printed on behalf of the call: marked.
        with _serving_call(self.headers):
            try:
                result = self.server.func(event)
            except (Exception, SystemExit) as exc:
                response = self._failure(exc, _format_user_traceback(exc))
            else:
                try:
                    response = build_response(result)
                except Exception as exc:
                    # The return value could not be mapped (bad statusCode
                    # or headers, not JSON-serialisable): the wrapper's own
                    # frames would not help the user, so report only the
                    # exception line.
                    tb_text = "".join(traceback.format_exception_only(type(exc), exc))
                    response = self._failure(exc, tb_text)
        status, headers, data = response
        self._send(status, headers, data)
        return status


# ---------------------------------------------------------------------------
# Job mode: one call, the event from a file or stdin, the result on stdout
# ---------------------------------------------------------------------------


def _job_default(value):
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", errors="replace")
    raise TypeError(
        "Object of type %s is not JSON serializable" % type(value).__name__
    )


def job_result_json(result):
    """The function's return value as one line of JSON: bytes become a
    string (UTF-8, invalid bytes replaced); NaN and infinities are refused."""
    return json.dumps(
        result, ensure_ascii=False, allow_nan=False, default=_job_default
    )


def _health_document():
    """What the health check answers: with the instance the driver started
    this process as, so a driver can tell its process from another one that
    took the port."""
    doc = {"status": "ok"}
    instance = os.environ.get("SLESS_INSTANCE")
    if instance:
        doc["instance"] = instance
    return doc


def _specialise(argv):
    """Pool mode: waits for the line that says what to run (see the module
    docs) and returns the arguments of a process started for it."""
    line = sys.stdin.buffer.readline()
    if not line.strip():
        sys.exit(0)
    try:
        spec = json.loads(line)
        env = spec.get("env") or {}
        if not isinstance(env, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items()
        ):
            raise ValueError("env must map names to strings")
    except (ValueError, AttributeError) as exc:
        _fail(EXIT_CONFIG, "the pool's line is not what to run: %s" % exc)
    os.environ.update(env)
    if "TZ" in env:
        time.tzset()
    argv = [a for a in argv if a != "--pool"]
    if spec.get("job"):
        argv.append("--job")
    return argv


def _job_requested(argv):
    return "--job" in argv or os.environ.get("SLESS_JOB") == "1"


def _read_job_event():
    """The event of a job: the file ``SLESS_JOB_EVENT_FILE`` names when it
    is set (how the drivers hand it over), else stdin."""
    path = os.environ.get("SLESS_JOB_EVENT_FILE")
    if path is not None:
        where = "the event in SLESS_JOB_EVENT_FILE %r" % path
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except OSError as exc:
            _fail(
                EXIT_CONFIG,
                "SLESS_JOB_EVENT_FILE %r cannot be read: %s" % (path, exc.strerror or exc),
            )
    else:
        where = "the event on stdin"
        raw = sys.stdin.buffer.read()
    try:
        return json.loads(raw.decode("utf-8", errors="replace"))
    except ValueError as exc:
        _fail(EXIT_CONFIG, "%s is not JSON: %s" % (where, exc))


def run_job(func):
    """Call ``func`` once with the job's event; returns the exit code."""
    event = _read_job_event()
    # No call is current in a job: what it prints passes through unmarked.
    stdout = _install_outputs()
    try:
        result = func(event)
    except Exception as exc:
        sys.stderr.write(_format_user_traceback(exc))
        sys.stderr.flush()
        return 1
    finally:
        sys.stdout = stdout
    try:
        line = job_result_json(result)
    except (TypeError, ValueError) as exc:
        sys.stderr.write("".join(traceback.format_exception_only(type(exc), exc)))
        sys.stderr.flush()
        return 1
    if not stdout.at_line_start:
        stdout.write("\n")
    stdout.write(line + "\n")
    stdout.flush()
    return 0


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------


def main(argv=None):
    try:
        sys.stdout.reconfigure(line_buffering=True)
    except Exception:
        pass
    # Before the function's module is imported: a logging handler it sets
    # up then writes through them too.
    _install_outputs()
    argv = sys.argv[1:] if argv is None else argv
    if "--pool" in argv:
        argv = _specialise(argv)
    if _job_requested(argv):
        _, _, code_dir, deps_dir, entrypoint = _read_config(job=True)
        _setup_sys_path(code_dir, deps_dir)
        os.chdir(code_dir)
        return run_job(load_entrypoint(entrypoint))
    host, port, code_dir, deps_dir, entrypoint = _read_config()
    _setup_sys_path(code_dir, deps_dir)
    os.chdir(code_dir)
    func = load_entrypoint(entrypoint)

    listen_fd = _listen_fd()
    try:
        server = RuntimeServer((host, port), Handler, func, listen_fd)
    except OSError as exc:
        if listen_fd is not None:
            _fail(EXIT_LISTEN, "cannot serve on SLESS_LISTEN_FD %d: %s" % (listen_fd, exc))
        _fail(EXIT_LISTEN, "cannot listen on %s:%s: %s" % (host, port, exc))

    stopping = threading.Event()

    def on_signal(signum, frame):
        if stopping.is_set():
            return
        stopping.set()
        # shutdown() waits for serve_forever() to return, which runs in this
        # (main) thread: call it from another thread.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    bound_host, bound_port = server.server_address[:2]
    _log("sless: serving %s on %s:%s" % (entrypoint, bound_host, bound_port))
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
    if not server.in_flight.wait_idle(SHUTDOWN_GRACE_SECONDS):
        _log("sless: requests still running after %.0fs, exiting anyway" % SHUTDOWN_GRACE_SECONDS)
    _log("sless: stopped")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
