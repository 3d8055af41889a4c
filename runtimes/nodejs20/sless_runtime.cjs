'use strict';
/**
 * sless HTTP wrapper for Node.js functions (runtime nodejs20).
 *
 * Loads the user's entrypoint (`module.function`) once at start, then calls it
 * with one `event` object per HTTP request and turns its return value (or the
 * value its returned Promise settles to) into the HTTP response. The contract
 * is described in runtimes/README.md; it is the same for every runtime.
 *
 * Configuration (environment):
 *   SLESS_LISTEN_FD   a listening TCP socket the process inherited, to serve
 *                     on (how the local driver starts it: the socket is sless's)
 *   SLESS_PORT        port to listen on (required without SLESS_LISTEN_FD)
 *   SLESS_HOST        address to listen on (default 127.0.0.1)
 *   SLESS_CODE_DIR    directory with the user's files (required); the working
 *                     directory, and where `node_modules` is looked up
 *   SLESS_ENTRYPOINT  module.function; the module part may be dotted
 *                     (`pkg.mod.fn` is export `fn` of pkg/mod.js)
 *
 * The module is `<module>.js`, `<module>.cjs` or `<module>.mjs` (the first
 * that exists). CommonJS modules are loaded with require(); `.mjs` files, and
 * `.js` files that Node treats as ES modules, with import().
 *
 * Exit codes: 0 after SIGTERM/SIGINT, 2 bad configuration, 3 the entrypoint
 * could not be loaded or is not a function, 4 the port could not be bound.
 *
 * Job mode (`sless_runtime.cjs --job`, or SLESS_JOB=1): no port; the event is
 * read as JSON from the file SLESS_JOB_EVENT_FILE names when it is set, else
 * from stdin, the function is called once, its result is written to stdout as
 * one line of JSON, and the wrapper exits 0 (1 when the function threw or its
 * Promise was rejected).
 *
 * Pool mode (`sless_runtime.cjs --pool`): started ahead of any function, with
 * this module and what it requires loaded. The process reads one line of JSON
 * from stdin, `{"env": {...}, "job": false}`, adds `env` to its environment,
 * and goes on as a process started with that environment (with `"job": true`,
 * in job mode, its event being the rest of stdin when SLESS_JOB_EVENT_FILE is
 * not set). End of input before the line: it exits 0.
 *
 * Output: a line the function writes to process.stdout or process.stderr
 * (console.log, console.error) while serving a call whose request carried a
 * `Sless-Invocation-Id` is written as `\x1e<id>\x1f<line>`, or
 * `\x1e<id>;<traceparent>\x1f<line>` when it came with a `traceparent` (see
 * "Output and the call that printed it" in runtimes/README.md).
 *
 * Node.js built-in modules only.
 */

const { AsyncLocalStorage } = require('node:async_hooks');
const http = require('node:http');
const fs = require('node:fs');
const path = require('node:path');
const { pathToFileURL } = require('node:url');

const RESERVED_PREFIX = '/__sless/';
const HEALTH_PATH = '/__sless/health';
const SHUTDOWN_GRACE_MS = 5000;
const SERVER_NAME = 'sless-nodejs20';

const EXIT_CONFIG = 2;
const EXIT_ENTRYPOINT = 3;
const EXIT_LISTEN = 4;

// Status codes whose responses never carry a body (RFC 9110 section 6.4.1).
// A Content-Length header is not sent for 204 and 304 either.
const NO_BODY_STATUSES = new Set([204, 304]);

// Response headers the wrapper controls itself; values set by the function
// are ignored so that the message framing stays correct.
const FRAMING_HEADERS = new Set(['content-length', 'transfer-encoding', 'connection']);

const MODULE_EXTENSIONS = ['.js', '.cjs', '.mjs'];
const EMPTY = Buffer.alloc(0);

// Output and the call that printed it (runtimes/README.md): a line written
// while serving the call named by INVOCATION_HEADER is written as MARK + id
// + MARK_END + the line + "\n"; the id is followed by ";" and the call's
// traceparent when its request has one, well formed.
const INVOCATION_HEADER = 'sless-invocation-id';
const MARK = Buffer.from([0x1e]);
const MARK_END = Buffer.from([0x1f]);
const NEWLINE = Buffer.from([0x0a]);
// A call's line still without its newline is written as a line of its own
// once it is longer than this many bytes.
const PARTIAL_LINE_LIMIT = 16 * 1024;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const TRACEPARENT = /^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/;

/** process.stdout and process.stderr once markOutput() patched them. */
const outputs = {};

/** The wrapper's own line: never marked, even while a call runs. */
function log(message) {
  try {
    if (outputs.stderr) outputs.stderr.unmarked(message + '\n');
    else process.stderr.write(message + '\n');
  } catch (_) {
    // Nothing sensible is left to do.
  }
}

function fail(code, message) {
  log('sless: ' + message);
  process.exit(code);
}

/** The function returned a value that cannot be turned into a response. */
class InvalidResponse extends Error {}

// ---------------------------------------------------------------------------
// Configuration and loading
// ---------------------------------------------------------------------------

/** The inherited listening socket SLESS_LISTEN_FD names, or null. */
function listenFd(env) {
  const text = (env.SLESS_LISTEN_FD || '').trim();
  if (!text) return null;
  const fd = /^[0-9]+$/.test(text) ? Number(text) : -1;
  if (!(fd >= 0 && Number.isSafeInteger(fd))) {
    fail(EXIT_CONFIG, `SLESS_LISTEN_FD ${JSON.stringify(text)} is not a file descriptor`);
  }
  return fd;
}

function readConfig(env, job = false) {
  const portText = (env.SLESS_PORT || '').trim();
  const host = (env.SLESS_HOST || '').trim() || '127.0.0.1';
  const codeDir = (env.SLESS_CODE_DIR || '').trim();
  const entrypoint = (env.SLESS_ENTRYPOINT || '').trim();

  let port = null;
  const fd = job ? null : listenFd(env);
  if (!job && fd === null) {
    if (!portText) fail(EXIT_CONFIG, 'SLESS_PORT is not set');
    port = /^[+-]?[0-9]+$/.test(portText) ? Number(portText) : -1;
    if (!(port >= 0 && port <= 65535)) {
      fail(EXIT_CONFIG, `SLESS_PORT ${JSON.stringify(portText)} is not a port number`);
    }
  }
  if (!codeDir) fail(EXIT_CONFIG, 'SLESS_CODE_DIR is not set');
  let isDir = false;
  try {
    isDir = fs.statSync(codeDir).isDirectory();
  } catch (_) {
    isDir = false;
  }
  if (!isDir) fail(EXIT_CONFIG, `SLESS_CODE_DIR ${JSON.stringify(codeDir)} is not a directory`);
  if (!entrypoint) fail(EXIT_CONFIG, 'SLESS_ENTRYPOINT is not set');
  return { host, port, fd, codeDir: path.resolve(codeDir), entrypoint };
}

/** The file of a dotted module name below `codeDir`, or null. */
function findModule(codeDir, moduleName) {
  const base = path.join(codeDir, ...moduleName.split('.'));
  for (const ext of MODULE_EXTENSIONS) {
    try {
      if (fs.statSync(base + ext).isFile()) return base + ext;
    } catch (_) {
      // Try the next extension.
    }
  }
  return null;
}

async function importModule(file) {
  if (file.endsWith('.mjs')) return import(pathToFileURL(file).href);
  try {
    return require(file);
  } catch (err) {
    // A `.js` file in a package with "type": "module" is an ES module.
    if (err && err.code === 'ERR_REQUIRE_ESM') return import(pathToFileURL(file).href);
    throw err;
  }
}

/**
 * Loads `module.function` and returns the function. Exits with code 3 (the
 * error and its stack on stderr) when the entrypoint is malformed, the module
 * is missing or fails to load, or the export is missing or not a function.
 */
async function loadEntrypoint(codeDir, entrypoint) {
  const dot = entrypoint.lastIndexOf('.');
  const moduleName = dot > 0 ? entrypoint.slice(0, dot) : '';
  const attr = dot > 0 ? entrypoint.slice(dot + 1) : '';
  if (!moduleName || !attr || moduleName.split('.').some((p) => !p || p === '..')) {
    fail(EXIT_ENTRYPOINT, `entrypoint ${JSON.stringify(entrypoint)} is not of the form module.function`);
  }
  const file = findModule(codeDir, moduleName);
  if (file === null) {
    const tried = MODULE_EXTENSIONS.map((ext) => moduleName.split('.').join('/') + ext).join(', ');
    fail(EXIT_ENTRYPOINT, `cannot load entrypoint ${JSON.stringify(entrypoint)}: no module file (tried ${tried})`);
  }
  let ns;
  try {
    ns = await importModule(file);
  } catch (err) {
    log(traceOf(err).trimEnd());
    fail(EXIT_ENTRYPOINT, `cannot load entrypoint ${JSON.stringify(entrypoint)}`);
  }
  let func = ns == null ? undefined : ns[attr];
  // A CommonJS module imported as an ES module has its exports on `default`.
  if (func === undefined && ns != null && ns.default != null && typeof ns.default === 'object') {
    func = ns.default[attr];
  }
  if (func === undefined) {
    fail(EXIT_ENTRYPOINT, `cannot load entrypoint ${JSON.stringify(entrypoint)}: ${path.basename(file)} exports no ${JSON.stringify(attr)}`);
  }
  if (typeof func !== 'function') {
    fail(EXIT_ENTRYPOINT, `entrypoint ${JSON.stringify(entrypoint)} is a ${typeName(func)}, not a function`);
  }
  return func;
}

// ---------------------------------------------------------------------------
// Request -> event, return value -> response
// ---------------------------------------------------------------------------

function typeName(value) {
  if (value === null) return 'null';
  if (value === undefined) return 'undefined';
  const ctor = value.constructor;
  if (typeof ctor === 'function' && ctor.name) return ctor.name;
  return typeof value;
}

/** Sets `obj[key]` as an own property, even for `__proto__`. */
function setOwn(obj, key, value) {
  if (key === '__proto__') {
    Object.defineProperty(obj, key, { value, writable: true, enumerable: true, configurable: true });
  } else {
    obj[key] = value;
  }
}

/** Splits a request target into the path (as received) and the query string. */
function splitTarget(target) {
  let rest = target;
  const hash = rest.indexOf('#');
  if (hash >= 0) rest = rest.slice(0, hash);
  const q = rest.indexOf('?');
  let pathPart = q >= 0 ? rest.slice(0, q) : rest;
  const query = q >= 0 ? rest.slice(q + 1) : '';
  // Absolute form (`http://host/path`): keep only the path.
  const absolute = /^[A-Za-z][A-Za-z0-9+.-]*:\/\/[^/]*/.exec(pathPart);
  if (absolute) pathPart = pathPart.slice(absolute[0].length);
  return { path: pathPart || '/', query };
}

function buildEvent(req, reqPath, query, body) {
  const headers = {};
  const raw = req.rawHeaders;
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const key = raw[i].toLowerCase();
    const value = raw[i + 1];
    setOwn(headers, key, Object.prototype.hasOwnProperty.call(headers, key) ? headers[key] + ', ' + value : value);
  }
  const params = {};
  for (const [k, v] of new URLSearchParams(query)) setOwn(params, k, v);
  const text = body.toString('utf8');
  let parsed = null;
  if (text.trim()) {
    try {
      parsed = JSON.parse(text);
    } catch (_) {
      parsed = null;
    }
  }
  return { method: req.method, path: reqPath, query: params, headers, body: text, json: parsed };
}

function rejectNonFinite(_key, value) {
  if (typeof value === 'number' && !Number.isFinite(value)) {
    throw new TypeError(`${value} is not JSON-serialisable`);
  }
  return value;
}

/** JSON bytes of a value; throws for what JSON cannot represent. */
function jsonBytes(value) {
  const text = JSON.stringify(value, rejectNonFinite);
  if (text === undefined) throw new TypeError(`a ${typeName(value)} is not JSON-serialisable`);
  return Buffer.from(text, 'utf8');
}

function isBytes(value) {
  return value instanceof ArrayBuffer || ArrayBuffer.isView(value);
}

function toBuffer(value) {
  if (Buffer.isBuffer(value)) return value;
  if (value instanceof ArrayBuffer) return Buffer.from(value);
  return Buffer.from(value.buffer, value.byteOffset, value.byteLength);
}

function isPlainMap(value) {
  return value !== null && typeof value === 'object' && !Array.isArray(value) && !isBytes(value);
}

function hasHeader(headers, name) {
  return headers.some(([k]) => k.toLowerCase() === name);
}

/** Turns the function's `headers` value into a list of [name, value]. */
function normaliseHeaders(raw) {
  if (raw === null || raw === undefined) return [];
  if (!isPlainMap(raw)) throw new InvalidResponse(`'headers' must be an object, not ${typeName(raw)}`);
  const result = [];
  for (const name of Object.keys(raw)) {
    if (!name || /[\r\n: \t]/.test(name)) throw new InvalidResponse(`invalid header name ${JSON.stringify(name)}`);
    try {
      http.validateHeaderName(name);
    } catch (_) {
      throw new InvalidResponse(`invalid header name ${JSON.stringify(name)}`);
    }
    if (FRAMING_HEADERS.has(name.toLowerCase())) continue;
    const value = raw[name];
    const values = Array.isArray(value) ? value : [value];
    for (const v of values) {
      if (v === null || v === undefined) continue;
      const text = typeof v === 'string' ? v : String(v);
      if (text.includes('\r') || text.includes('\n')) {
        throw new InvalidResponse(`invalid value for header ${JSON.stringify(name)}`);
      }
      try {
        http.validateHeaderValue(name, text);
      } catch (_) {
        throw new InvalidResponse(`invalid value for header ${JSON.stringify(name)}`);
      }
      result.push([name, text]);
    }
  }
  return result;
}

function statusCode(raw) {
  if (typeof raw === 'boolean') throw new InvalidResponse("'statusCode' must be an integer, not boolean");
  let value = raw;
  if (typeof value === 'string' && /^[0-9]+$/.test(value.trim())) value = Number(value.trim());
  if (typeof value !== 'number' || !Number.isInteger(value)) {
    throw new InvalidResponse(`'statusCode' must be an integer, not ${typeName(raw)}`);
  }
  if (value < 200 || value > 599) throw new InvalidResponse(`'statusCode' ${value} is outside 200..599`);
  return value;
}

/** Maps the function's return value to [status, [[name, value]], body Buffer]. */
function buildResponse(result) {
  if (typeof result === 'string') {
    return [200, [['Content-Type', 'text/plain; charset=utf-8']], Buffer.from(result, 'utf8')];
  }
  if (isBytes(result)) return [200, [['Content-Type', 'application/octet-stream']], toBuffer(result)];
  if (result === null || result === undefined) return [204, [], EMPTY];
  if (isPlainMap(result) && Object.prototype.hasOwnProperty.call(result, 'statusCode')) {
    const status = statusCode(result.statusCode);
    const headers = normaliseHeaders(result.headers);
    const body = result.body;
    let data;
    let contentType = null;
    if (body === null || body === undefined) {
      data = EMPTY;
    } else if (typeof body === 'string') {
      data = Buffer.from(body, 'utf8');
      contentType = 'text/plain; charset=utf-8';
    } else if (isBytes(body)) {
      data = toBuffer(body);
      contentType = 'application/octet-stream';
    } else {
      data = jsonBytes(body);
      contentType = 'application/json';
    }
    if (contentType !== null && !hasHeader(headers, 'content-type')) headers.push(['Content-Type', contentType]);
    return [status, headers, data];
  }
  // Any other object, an array, or a scalar (number, boolean): JSON.
  return [200, [['Content-Type', 'application/json']], jsonBytes(result)];
}

function messageOf(err) {
  try {
    return err instanceof Error ? String(err.message) : String(err);
  } catch (_) {
    return '<unprintable>';
  }
}

/** The stack of a thrown value, or its one-line description. */
function traceOf(err) {
  let stack = null;
  try {
    stack = err instanceof Error && typeof err.stack === 'string' ? err.stack : null;
  } catch (_) {
    stack = null;
  }
  return (stack || `${typeName(err)}: ${messageOf(err)}`) + '\n';
}

function errorResponse(err, traceback) {
  const body = { error: typeName(err), message: messageOf(err), traceback };
  return [500, [['Content-Type', 'application/json']], Buffer.from(JSON.stringify(body), 'utf8')];
}

// ---------------------------------------------------------------------------
// Output and the call that printed it
// ---------------------------------------------------------------------------

/**
 * The call the running code serves, `{ id, ended }`: entered around each
 * request's handling, so that timers and promises the function starts
 * carry it too. `ended` once it is answered: text its code writes later is
 * not held back any more.
 */
const currentCall = new AsyncLocalStorage();

/**
 * The call a request names, or null unless its Sless-Invocation-Id (one
 * header: Node.js joins repeated ones with ", ") is a UUID.
 */
function callOf(req) {
  const value = req.headers[INVOCATION_HEADER];
  const id = typeof value === 'string' ? value.trim().toLowerCase() : '';
  const tp = typeof req.headers.traceparent === 'string' ? req.headers.traceparent.trim() : '';
  const mark = TRACEPARENT.test(tp) ? `${id};${tp}` : id;
  return UUID.test(id) ? { id: Buffer.from(mark), ended: false } : null;
}

/**
 * Patches `stream.write`: bytes the code serving a call writes are held
 * until their line ends, then written as one marked line (one write per
 * line, so lines of concurrent calls never mix); other bytes pass through
 * as they are. Remembers whether the last bytes written ended a line, so
 * that a marked line, and a job's result, start on a line of their own.
 */
function markOutput(stream) {
  const write = stream.write.bind(stream);
  const held = new Map(); // call -> the start of its current line
  const output = { atLineStart: true };

  const track = (chunk) => {
    const length = typeof chunk === 'string' ? chunk.length : chunk.byteLength;
    if (length > 0) {
      const last = typeof chunk === 'string' ? chunk.charCodeAt(length - 1) : chunk[length - 1];
      output.atLineStart = last === 0x0a;
    }
  };
  const writeMarked = (call, lines, callback) => {
    // Text written outside any call left its line open: end it, so that
    // the mark starts a line.
    const parts = output.atLineStart ? [] : [NEWLINE];
    for (const line of lines) parts.push(MARK, call.id, MARK_END, line, NEWLINE);
    output.atLineStart = true;
    return write(Buffer.concat(parts), callback);
  };

  /** Writes what is not the function's output of a call. */
  output.unmarked = (chunk, callback) => {
    track(chunk);
    return write(chunk, callback);
  };
  /** Writes what `call` left of a line, with a newline added. */
  output.endCall = (call) => {
    call.ended = true;
    const rest = held.get(call);
    held.delete(call);
    if (rest) writeMarked(call, [rest]);
  };
  stream.write = (chunk, encoding, callback) => {
    if (typeof encoding === 'function') {
      callback = encoding;
      encoding = undefined;
    }
    const call = currentCall.getStore();
    // Anything but text and bytes is the stream's to refuse.
    if (!call || (typeof chunk !== 'string' && !(chunk instanceof Uint8Array))) {
      if (typeof chunk === 'string' || chunk instanceof Uint8Array) track(chunk);
      return write(chunk, encoding, callback);
    }
    const bytes = typeof chunk === 'string' ? Buffer.from(chunk, Buffer.isEncoding(encoding) ? encoding : 'utf8') : toBuffer(chunk);
    const text = held.has(call) ? Buffer.concat([held.get(call), bytes]) : bytes;
    held.delete(call);
    const lines = [];
    let start = 0;
    for (let end = text.indexOf(0x0a); end >= 0; end = text.indexOf(0x0a, start)) {
      lines.push(text.subarray(start, end));
      start = end + 1;
    }
    const rest = text.subarray(start);
    if (rest.length > 0 && (call.ended || rest.length > PARTIAL_LINE_LIMIT)) lines.push(rest);
    else if (rest.length > 0) held.set(call, Buffer.from(rest)); // a copy: the caller may reuse its buffer
    if (lines.length > 0) return writeMarked(call, lines, callback);
    if (callback) process.nextTick(callback, null);
    return !stream.writableNeedDrain;
  };
  return output;
}

/** Patches process.stdout and process.stderr (once). */
function markOutputs() {
  if (!outputs.stdout) {
    outputs.stdout = markOutput(process.stdout);
    outputs.stderr = markOutput(process.stderr);
  }
  return outputs;
}

/** Ends `call` (if any): the lines it left open are written. */
function endCall(call) {
  if (!call || call.ended) return;
  outputs.stdout.endCall(call);
  outputs.stderr.endCall(call);
}

// ---------------------------------------------------------------------------
// HTTP server
// ---------------------------------------------------------------------------

function send(res, method, status, headers, body) {
  const data = NO_BODY_STATUSES.has(status) ? EMPTY : body;
  const grouped = new Map();
  for (const [name, value] of headers) {
    const key = name.toLowerCase();
    const entry = grouped.get(key);
    if (entry) entry.values.push(value);
    else grouped.set(key, { name, values: [value] });
  }
  res.setHeader('Server', SERVER_NAME);
  for (const { name, values } of grouped.values()) {
    res.setHeader(name, values.length === 1 ? values[0] : values);
  }
  if (!NO_BODY_STATUSES.has(status)) res.setHeader('Content-Length', data.length);
  res.writeHead(status);
  res.end(method === 'HEAD' || data.length === 0 ? undefined : data);
}

function sendJson(res, method, status, value, extra = []) {
  const data = Buffer.from(JSON.stringify(value), 'utf8');
  send(res, method, status, [...extra, ['Content-Type', 'application/json']], data);
}

function failure(method, reqPath, err, traceback) {
  try {
    // Not log(): written on behalf of the call, so marked with its id.
    process.stderr.write(`sless: ${method} ${reqPath} raised:\n${traceback}`);
  } catch (_) {
    // Logging must not break the response.
  }
  return errorResponse(err, traceback);
}

async function respond(func, req, res, reqPath, query, body) {
  const method = req.method;
  if (reqPath.startsWith(RESERVED_PREFIX)) {
    if (reqPath !== HEALTH_PATH) {
      sendJson(res, method, 404, { error: 'NotFound', message: `no such path ${reqPath}` });
    } else if (method !== 'GET' && method !== 'HEAD') {
      sendJson(res, method, 405, { error: 'MethodNotAllowed', message: 'use GET' }, [['Allow', 'GET, HEAD']]);
    } else {
      sendJson(res, method, 200, healthDocument());
    }
    return;
  }

  const event = buildEvent(req, reqPath, query, body);
  let response;
  let result;
  let raised = false;
  try {
    result = func(event);
    if (result !== null && (typeof result === 'object' || typeof result === 'function') && typeof result.then === 'function') {
      result = await result;
    }
  } catch (err) {
    raised = true;
    response = failure(method, reqPath, err, traceOf(err));
  }
  if (!raised) {
    try {
      response = buildResponse(result);
    } catch (err) {
      // The return value could not be mapped (bad statusCode or headers, not
      // JSON-serialisable): the wrapper's own frames would not help the user,
      // so report only the error line.
      response = failure(method, reqPath, err, `${typeName(err)}: ${messageOf(err)}\n`);
    }
  }
  // The call's open lines are written before it is answered.
  endCall(currentCall.getStore());
  if (res.destroyed) return;
  send(res, method, ...response);
}

function createServer(func) {
  const inFlight = { count: 0, waiters: [] };
  const idle = () => {
    if (inFlight.count === 0) for (const wake of inFlight.waiters.splice(0)) wake();
  };
  // The request whose body a connection is reading: a malformed body ends it
  // with a 400 from the clientError handler.
  const reading = new WeakMap();

  const server = http.createServer(
    {
      // The head and the body go out in separate writes; with Nagle on, the
      // body waits for the client's delayed ACK of the head (about 40 ms) on
      // every keep-alive response.
      noDelay: true,
      maxHeaderSize: 64 * 1024,
    },
    (req, res) => {
      const started = process.hrtime.bigint();
      const { path: reqPath, query } = splitTarget(req.url || '/');
      const method = req.method;
      inFlight.count += 1;
      let done = false;
      const finish = (status) => {
        if (done) return;
        done = true;
        inFlight.count -= 1;
        const ms = Number(process.hrtime.bigint() - started) / 1e6;
        log(`${method} ${reqPath} ${status} ${ms.toFixed(2)}ms`);
        idle();
      };
      res.on('close', () => finish(res.writableFinished ? res.statusCode : '-'));
      reading.set(req.socket, finish);

      const chunks = [];
      req.on('data', (chunk) => chunks.push(chunk));
      req.on('end', () => {
        reading.delete(req.socket);
        const call = callOf(req);
        const answer = () => respond(func, req, res, reqPath, query, Buffer.concat(chunks));
        (call ? currentCall.run(call, answer) : answer()).catch((err) => {
          endCall(call);
          log('sless: error while answering a request:\n' + traceOf(err));
          if (!res.headersSent && !res.destroyed) {
            sendJson(res, method, 500, { error: typeName(err), message: messageOf(err), traceback: traceOf(err) });
          } else {
            res.destroy();
          }
        });
      });
    },
  );
  // Idle keep-alive connections (and stalled uploads) are closed after this
  // long; the time the function runs does not count.
  server.keepAliveTimeout = 300 * 1000;
  server.headersTimeout = 60 * 1000;
  server.requestTimeout = 300 * 1000;

  // Malformed request framing (a bad chunk size, a body that ends early):
  // 400 without calling the function, and the connection is closed.
  server.on('clientError', (err, socket) => {
    const finish = reading.get(socket);
    if (finish) {
      reading.delete(socket);
      finish(400);
    }
    if (err.code === 'ECONNRESET' || !socket.writable || (socket._httpMessage && socket._httpMessage.headersSent)) {
      socket.destroy();
      return;
    }
    const body = JSON.stringify({ error: 'BadRequest', message: String(err.message || err.code || 'bad request') });
    socket.end(
      'HTTP/1.1 400 Bad Request\r\n' +
        `Server: ${SERVER_NAME}\r\n` +
        'Content-Type: application/json\r\n' +
        `Content-Length: ${Buffer.byteLength(body)}\r\n` +
        'Connection: close\r\n\r\n' +
        body,
    );
  });

  server.waitIdle = (timeoutMs) =>
    new Promise((resolve) => {
      if (inFlight.count === 0) return resolve(true);
      const timer = setTimeout(() => resolve(false), timeoutMs);
      inFlight.waiters.push(() => {
        clearTimeout(timer);
        resolve(true);
      });
    });
  return server;
}

// ---------------------------------------------------------------------------
// Job mode: one call, the event from a file or stdin, the result on stdout
// ---------------------------------------------------------------------------

/**
 * The function's result as one line of JSON: `undefined` is `null`, bytes
 * (also as a `statusCode` form's body) become a UTF-8 string; throws for what
 * JSON cannot represent.
 */
function jobResultJson(result) {
  let value = result === undefined ? null : result;
  if (isBytes(value)) {
    value = toBuffer(value).toString('utf8');
  } else if (isPlainMap(value) && 'statusCode' in value && isBytes(value.body)) {
    value = { ...value, body: toBuffer(value.body).toString('utf8') };
  }
  return jsonBytes(value).toString('utf8');
}

/**
 * What the health check answers: with the instance the driver started this
 * process as, so a driver can tell its process from another one that took
 * the port.
 */
function healthDocument() {
  const instance = process.env.SLESS_INSTANCE;
  return instance ? { status: 'ok', instance } : { status: 'ok' };
}

/** What of stdin was read past the pool's line. */
let stdinLeft = EMPTY;

function readStdin() {
  return new Promise((resolve, reject) => {
    const chunks = [stdinLeft];
    stdinLeft = EMPTY;
    process.stdin.on('data', (chunk) => chunks.push(chunk));
    process.stdin.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    process.stdin.on('error', reject);
  });
}

/** Writes `text` to stdout and exits with `code` once it is written. */
function exitAfter(write, text, code) {
  if (!text) process.exit(code);
  write(text, () => process.exit(code));
}

/**
 * The event of a job: the file SLESS_JOB_EVENT_FILE names when it is set
 * (how the drivers hand it over), else stdin.
 */
async function readJobEvent() {
  const file = process.env.SLESS_JOB_EVENT_FILE;
  let text;
  let where;
  if (file !== undefined) {
    where = `the event in SLESS_JOB_EVENT_FILE ${JSON.stringify(file)}`;
    try {
      text = fs.readFileSync(file, 'utf8');
    } catch (err) {
      fail(EXIT_CONFIG, `SLESS_JOB_EVENT_FILE ${JSON.stringify(file)} cannot be read: ${messageOf(err)}`);
    }
  } else {
    where = 'the event on stdin';
    text = await readStdin();
  }
  try {
    return JSON.parse(text);
  } catch (err) {
    fail(EXIT_CONFIG, `${where} is not JSON: ${messageOf(err)}`);
  }
}

/**
 * Calls `func` once with the job's event, writes its result and exits.
 * Timers or connections the function left open do not keep the process
 * alive.
 */
async function runJob(func) {
  const event = await readJobEvent();
  // No call is current in a job: what it prints passes through unmarked.
  const stdout = markOutputs().stdout;
  let line;
  try {
    line = jobResultJson(await func(event));
  } catch (err) {
    log(traceOf(err).trimEnd());
    return exitAfter(stdout.unmarked, '', 1);
  }
  exitAfter(stdout.unmarked, (stdout.atLineStart ? '' : '\n') + line + '\n', 0);
}

// ---------------------------------------------------------------------------
// Main
// ---------------------------------------------------------------------------

/** The first line of stdin (without its newline), or null at its end. */
function readLine() {
  return new Promise((resolve, reject) => {
    const chunks = [];
    const done = (line, rest) => {
      process.stdin.removeListener('data', onData);
      process.stdin.removeListener('end', onEnd);
      process.stdin.removeListener('error', reject);
      process.stdin.pause();
      stdinLeft = rest;
      resolve(line);
    };
    const onData = (chunk) => {
      const at = chunk.indexOf(0x0a);
      if (at < 0) {
        chunks.push(chunk);
        return;
      }
      chunks.push(chunk.subarray(0, at));
      done(Buffer.concat(chunks).toString('utf8'), chunk.subarray(at + 1));
    };
    const onEnd = () => done(chunks.length ? Buffer.concat(chunks).toString('utf8') : null, EMPTY);
    process.stdin.on('data', onData);
    process.stdin.on('end', onEnd);
    process.stdin.on('error', reject);
  });
}

/**
 * Pool mode: waits for the line that says what to run (see the module docs),
 * sets its environment and returns whether it is a job.
 */
async function specialise() {
  const line = await readLine();
  if (line === null || line.trim() === '') process.exit(0);
  let spec;
  try {
    spec = JSON.parse(line);
    const env = spec === null || typeof spec !== 'object' || Array.isArray(spec) ? null : spec.env || {};
    if (env === null || typeof env !== 'object' || Object.values(env).some((v) => typeof v !== 'string')) {
      throw new Error('env must map names to strings');
    }
    Object.assign(process.env, env);
  } catch (err) {
    fail(EXIT_CONFIG, `the pool's line is not what to run: ${messageOf(err)}`);
  }
  return spec.job === true;
}

async function main() {
  markOutputs();
  const args = process.argv.slice(2);
  const pooledJob = args.includes('--pool') ? await specialise() : false;
  if (args.includes('--pool') && !pooledJob) process.stdin.destroy();
  if (pooledJob || args.includes('--job') || process.env.SLESS_JOB === '1') {
    const { codeDir, entrypoint } = readConfig(process.env, true);
    process.chdir(codeDir);
    return runJob(await loadEntrypoint(codeDir, entrypoint));
  }
  const { host, port, fd, codeDir, entrypoint } = readConfig(process.env);
  process.chdir(codeDir);
  const func = await loadEntrypoint(codeDir, entrypoint);

  // An error in code the function left running (a timer, an unawaited
  // promise) is logged; the function keeps serving.
  process.on('uncaughtException', (err) => log('sless: uncaught exception:\n' + traceOf(err).trimEnd()));
  process.on('unhandledRejection', (err) => log('sless: unhandled promise rejection:\n' + traceOf(err).trimEnd()));

  const server = createServer(func);
  await new Promise((resolve) => {
    if (fd !== null) {
      // A socket bound and listening already, handed over by whoever
      // started this process: serve on it as it is.
      server.once('error', (err) => fail(EXIT_LISTEN, `cannot serve on SLESS_LISTEN_FD ${fd}: ${err.message}`));
      server.listen({ fd }, resolve);
    } else {
      server.once('error', (err) => fail(EXIT_LISTEN, `cannot listen on ${host}:${port}: ${err.message}`));
      server.listen({ host, port }, resolve);
    }
  });
  const bound = server.address() || {};
  log(`sless: serving ${entrypoint} on ${bound.address}:${bound.port}`);

  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    server.close();
    server.closeIdleConnections();
    if (!(await server.waitIdle(SHUTDOWN_GRACE_MS))) {
      log(`sless: requests still running after ${SHUTDOWN_GRACE_MS / 1000}s, exiting anyway`);
    }
    server.closeAllConnections();
    log('sless: stopped');
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

if (require.main === module) {
  main().catch((err) => {
    log('sless: ' + traceOf(err).trimEnd());
    process.exit(1);
  });
}

module.exports = { buildResponse, buildEvent, splitTarget, InvalidResponse, jobResultJson };
