'use strict';
/**
 * Tests for sless_runtime.cjs (Node.js built-in test runner only).
 *
 * Run from the repository root (or anywhere else) with:
 *     node --test runtimes/nodejs20/test_sless_runtime.cjs
 *
 * Each test starts the wrapper as a child process against small function
 * modules written to a temporary directory, on a free loopback port.
 */

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const http = require('node:http');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const { randomUUID } = require('node:crypto');

const WRAPPER = path.join(__dirname, 'sless_runtime.cjs');
const STARTUP_DEADLINE_MS = 10000;
const EXIT_DEADLINE_MS = 10000;

// Function modules written to the code directory. MARKER_FILE is the path of
// a file the `counted` function appends to on every call.
const MODULES = {
  'funcs.js': `
    const fs = require('node:fs');
    exports.text = () => 'hello text';
    exports.asObject = () => ({ greeting: 'hi', n: 1 });
    exports.asList = () => [1, 'two', { three: 3 }];
    exports.status = () => ({
      statusCode: 201,
      headers: { 'X-Custom': 'yes', Location: '/things/1', 'Set-Cookie': ['a=1', 'b=2'] },
      body: { created: true },
    });
    exports.statusText = () => ({ statusCode: '202', headers: { 'Content-Type': 'text/csv' }, body: 'a,b\\n' });
    exports.asBytes = () => Buffer.from([0, 1, 255]);
    exports.nothing = () => undefined;
    exports.number = () => 42;
    exports.echo = (event) => event;
    exports.boom = (event) => {
      if (event.path === '/boom') return null.property;
      return 'still alive';
    };
    exports.asyncEcho = async (event) => {
      await new Promise((resolve) => setTimeout(resolve, 5));
      return { async: true, path: event.path };
    };
    exports.rejects = async () => {
      class QuotaExceeded extends Error {}
      throw new QuotaExceeded('over the limit');
    };
    exports.throwsString = () => {
      throw 'plain string';
    };
    exports.notSerialisable = () => ({ value: 10n });
    exports.notFinite = () => ({ value: Infinity });
    exports.badStatus = () => ({ statusCode: 99 });
    exports.badHeader = () => ({ statusCode: 200, headers: { 'X-Bad': 'a\\r\\nInjected: yes' } });
    exports.slow = async () => {
      await new Promise((resolve) => setTimeout(resolve, 300));
      return 'finished';
    };
    exports.counted = (event) => {
      fs.appendFileSync(process.env.MARKER_FILE, event.path + '\\n');
      return 'counted';
    };
    exports.envVar = () => process.env.GREETING || 'unset';
    exports.notAFunction = 'just a string';
  `,
  'jobs.js': `
    exports.echoInput = async (event) => ({ ok: true, input: event.json, method: event.method });
    exports.text = () => 'done';
    exports.status = () => ({ statusCode: 201, headers: { 'X-A': 'b' }, body: Buffer.from('made') });
    exports.raw = () => Buffer.from([0x63, 0x61, 0x66, 0xc3, 0xa9]);
    exports.nothing = () => undefined;
    exports.chatty = () => {
      console.log('first line');
      process.stdout.write('no newline at the end');
      console.error('to stderr');
      return [1, 2];
    };
    exports.lingers = () => {
      setInterval(() => {}, 1000);
      return 'returned';
    };
    exports.rejects = async () => {
      class QuotaExceeded extends Error {}
      throw new QuotaExceeded('over the limit');
    };
    exports.exits = () => process.exit(3);
    exports.notSerialisable = () => ({ value: 10n });
  `,
  'marks.js': `
    console.log('imported marks');
    process.stdout.write('import left its line open');
    // Two calls meet here: each writes while the other is in flight.
    const waiting = [];
    const meet = () => new Promise((resolve) => {
      waiting.push(resolve);
      if (waiting.length === 2) for (const wake of waiting.splice(0)) wake();
    });
    exports.prints = async () => {
      console.log('to stdout');
      console.error('to stderr');
      process.stdout.write('two\\nlines\\n');
      process.stdout.write(Buffer.from('bytes\\n'));
      await new Promise((resolve) => setTimeout(resolve, 5));
      console.log('after a timer');
      return 'printed';
    };
    exports.partial = async () => {
      const fits = process.stdout.write('y'.repeat(20000));
      await new Promise((resolve) => process.stdout.write('x', resolve));
      return typeof fits;
    };
    exports.together = async (event) => {
      const n = event.query.n;
      console.log('a-' + n);
      process.stdout.write('b-' + n + '-');
      await meet();
      console.log('end');
      await meet();
      console.log('c-' + n);
      return n;
    };
    exports.fails = () => {
      console.log('before the failure');
      throw new RangeError('no such record');
    };
  `,
  'broken.js': `
    require('sless-no-such-module-for-tests');
    exports.handle = () => 'unreachable';
  `,
  'throws_at_load.js': `
    throw new RangeError('refusing to load');
  `,
  'esm.mjs': `
    import { readFileSync } from 'node:fs';
    export async function handle(event) {
      return { from: 'esm', method: event.method };
    }
    export default function fallback() { return 'default'; }
  `,
  'pkg/mod.js': `
    const dep = require('depmod');
    module.exports = { func: () => ({ from: 'pkg.mod', dep: dep.VALUE }) };
  `,
  'node_modules/depmod/package.json': '{"name": "depmod", "version": "1.0.0", "main": "index.js"}\n',
  'node_modules/depmod/index.js': "exports.VALUE = 'from node_modules';\n",
  'esmpkg/package.json': '{"type": "module"}\n',
  'esmpkg/handler.js': `
    export const handle = (event) => 'esm in a type=module package: ' + event.path;
  `,
};

let tmp;
let marker;

function writeTree(root, files) {
  for (const [rel, content] of Object.entries(files)) {
    const file = path.join(root, rel);
    fs.mkdirSync(path.dirname(file), { recursive: true });
    fs.writeFileSync(file, content.replace(/^\n/, ''));
  }
}

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** One wrapper process serving one entrypoint. */
class Runtime {
  constructor(port, entrypoint, env = {}, pool = false) {
    this.port = port;
    this.stdout = '';
    this.stderr = '';
    this.exitCode = null;
    const given = {
      SLESS_PORT: String(port),
      SLESS_HOST: '127.0.0.1',
      SLESS_CODE_DIR: path.join(tmp, 'code'),
      SLESS_ENTRYPOINT: entrypoint,
      MARKER_FILE: marker,
      ...env,
    };
    this.exited = new Promise((resolve) => {
      // A pooled wrapper starts with none of it: its line hands it over.
      this.proc = spawn(process.execPath, pool ? [WRAPPER, '--pool'] : [WRAPPER], {
        cwd: tmp,
        env: pool ? { ...process.env } : { ...process.env, ...given },
        stdio: [pool ? 'pipe' : 'ignore', 'pipe', 'pipe'],
      });
      if (pool) this.proc.stdin.end(JSON.stringify({ env: given }) + '\n');
      this.proc.stdout.on('data', (chunk) => {
        this.stdout += chunk.toString('utf8');
      });
      this.proc.stderr.on('data', (chunk) => {
        this.stderr += chunk.toString('utf8');
      });
      this.proc.on('exit', (code, signal) => {
        this.exitCode = code === null ? signal : code;
        resolve(this.exitCode);
      });
    });
  }

  async waitHealthy() {
    const deadline = Date.now() + STARTUP_DEADLINE_MS;
    while (Date.now() < deadline) {
      if (this.exitCode !== null) {
        assert.fail(`wrapper exited with ${this.exitCode} before becoming healthy:\n${this.stderr}`);
      }
      try {
        const res = await this.request('GET', '/__sless/health');
        if (res.status === 200) return;
      } catch (_) {
        // Not listening yet.
      }
      await sleep(20);
    }
    assert.fail(`wrapper not healthy after ${STARTUP_DEADLINE_MS} ms:\n${this.stderr}`);
  }

  async waitExit() {
    const timeout = sleep(EXIT_DEADLINE_MS).then(() => 'timeout');
    const code = await Promise.race([this.exited, timeout]);
    assert.notEqual(code, 'timeout', 'wrapper did not exit in time');
    return code;
  }

  request(method, target, { body, headers = {}, agent = false } = {}) {
    return new Promise((resolve, reject) => {
      const req = http.request(
        { host: '127.0.0.1', port: this.port, method, path: target, headers, agent },
        (res) => {
          const chunks = [];
          res.on('data', (c) => chunks.push(c));
          res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }));
          res.on('error', reject);
        },
      );
      req.on('error', reject);
      if (Array.isArray(body)) {
        for (const part of body) req.write(part);
        req.end();
      } else {
        req.end(body);
      }
    });
  }

  /** Waits until `check()` holds (what the wrapper wrote arrives on its own time). */
  async waitFor(check) {
    const deadline = Date.now() + STARTUP_DEADLINE_MS;
    while (!check() && Date.now() < deadline) await sleep(10);
  }

  stop() {
    if (this.exitCode === null) this.proc.kill('SIGKILL');
    return this.exited;
  }
}

const running = [];

async function start(entrypoint, { healthy = true, env, pool = false } = {}) {
  const rt = new Runtime(await freePort(), entrypoint, env, pool);
  running.push(rt);
  if (healthy) await rt.waitHealthy();
  return rt;
}

function json(res) {
  assert.equal(res.headers['content-type'], 'application/json');
  assert.equal(res.headers['content-length'], String(res.body.length));
  return JSON.parse(res.body.toString('utf8'));
}

before(() => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sless-node-runtime-test-'));
  writeTree(path.join(tmp, 'code'), MODULES);
  marker = path.join(tmp, 'calls.txt');
});

after(async () => {
  await Promise.all(running.map((rt) => rt.stop()));
  fs.rmSync(tmp, { recursive: true, force: true });
});

// -- return mapping ---------------------------------------------------------

test('a string is text/plain', async () => {
  const rt = await start('funcs.text');
  const res = await rt.request('GET', '/');
  assert.equal(res.status, 200);
  assert.equal(res.headers['content-type'], 'text/plain; charset=utf-8');
  assert.equal(res.headers['content-length'], String(res.body.length));
  assert.equal(res.body.toString(), 'hello text');
});

test('an object and an array are JSON', async () => {
  let rt = await start('funcs.asObject');
  let res = await rt.request('POST', '/anything', { body: 'ignored' });
  assert.equal(res.status, 200);
  assert.deepEqual(json(res), { greeting: 'hi', n: 1 });

  rt = await start('funcs.asList');
  res = await rt.request('GET', '/');
  assert.deepEqual(json(res), [1, 'two', { three: 3 }]);
});

test('the statusCode form sets status, headers and a JSON body', async () => {
  const rt = await start('funcs.status');
  const res = await rt.request('PUT', '/things');
  assert.equal(res.status, 201);
  assert.equal(res.headers['x-custom'], 'yes');
  assert.equal(res.headers.location, '/things/1');
  assert.deepEqual(res.headers['set-cookie'], ['a=1', 'b=2']);
  assert.deepEqual(json(res), { created: true });
});

test('the statusCode form keeps a given content type', async () => {
  const rt = await start('funcs.statusText');
  const res = await rt.request('GET', '/');
  assert.equal(res.status, 202);
  assert.equal(res.headers['content-type'], 'text/csv');
  assert.equal(res.body.toString(), 'a,b\n');
});

test('bytes, nothing and scalars', async () => {
  let rt = await start('funcs.asBytes');
  let res = await rt.request('GET', '/');
  assert.equal(res.status, 200);
  assert.equal(res.headers['content-type'], 'application/octet-stream');
  assert.deepEqual([...res.body], [0, 1, 255]);

  rt = await start('funcs.nothing');
  res = await rt.request('DELETE', '/x');
  assert.equal(res.status, 204);
  assert.equal(res.body.length, 0);
  assert.equal(res.headers['content-length'], undefined);

  rt = await start('funcs.number');
  res = await rt.request('GET', '/');
  assert.deepEqual(json(res), 42);
});

test('an async function is awaited', async () => {
  const rt = await start('funcs.asyncEcho');
  const res = await rt.request('GET', '/later');
  assert.equal(res.status, 200);
  assert.deepEqual(json(res), { async: true, path: '/later' });
});

test('a dotted module finds its dependency in node_modules', async () => {
  const rt = await start('pkg.mod.func');
  const res = await rt.request('GET', '/');
  assert.deepEqual(json(res), { from: 'pkg.mod', dep: 'from node_modules' });
});

test('ES modules load: .mjs, and .js in a type=module package', async () => {
  let rt = await start('esm.handle');
  let res = await rt.request('PATCH', '/');
  assert.deepEqual(json(res), { from: 'esm', method: 'PATCH' });

  rt = await start('esmpkg.handler.handle');
  res = await rt.request('GET', '/p');
  assert.equal(res.body.toString(), 'esm in a type=module package: /p');
});

// -- the event --------------------------------------------------------------

test('the event has the query, lowercase headers and the parsed JSON body', async () => {
  const rt = await start('funcs.echo');
  const body = JSON.stringify({ name: 'ada', n: [1, 2] });
  const res = await rt.request('PATCH', '/some/path?a=1&b=two%20words&a=3&empty=&flag', {
    body,
    headers: { 'Content-Type': 'application/json', 'X-Test-Header': 'Value-1', 'X-Twice': ['one', 'two'] },
  });
  assert.equal(res.status, 200);
  const event = json(res);
  assert.deepEqual(Object.keys(event).sort(), ['body', 'headers', 'json', 'method', 'path', 'query']);
  assert.equal(event.method, 'PATCH');
  assert.equal(event.path, '/some/path');
  assert.deepEqual(event.query, { a: '3', b: 'two words', empty: '', flag: '' });
  assert.equal(event.headers['x-test-header'], 'Value-1');
  assert.equal(event.headers['x-twice'], 'one, two');
  assert.equal(event.headers['content-type'], 'application/json');
  assert.ok(Object.keys(event.headers).every((k) => k === k.toLowerCase()));
  assert.equal(event.body, body);
  assert.deepEqual(event.json, { name: 'ada', n: [1, 2] });
});

test('a body that is not JSON, then an empty body on the same connection', async () => {
  const rt = await start('funcs.echo');
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  try {
    let res = await rt.request('POST', '/', { body: Buffer.from('not json \xff', 'latin1'), agent });
    let event = json(res);
    assert.equal(event.body, 'not json \ufffd');
    assert.equal(event.json, null);
    res = await rt.request('GET', '/again', { agent });
    event = json(res);
    assert.equal(event.path, '/again');
    assert.equal(event.body, '');
    assert.equal(event.json, null);
    assert.deepEqual(event.query, {});
  } finally {
    agent.destroy();
  }
});

test('a chunked body is read', async () => {
  const rt = await start('funcs.echo');
  const parts = ['{"name": ', '"chunked", ', '"parts": 3}'];
  const res = await rt.request('POST', '/upload', {
    body: parts,
    headers: { 'Transfer-Encoding': 'chunked', 'Content-Type': 'application/json' },
  });
  const event = json(res);
  assert.equal(event.body, parts.join(''));
  assert.deepEqual(event.json, { name: 'chunked', parts: 3 });
});

test('a malformed chunked body gets 400 without calling the function', async () => {
  fs.rmSync(marker, { force: true });
  const rt = await start('funcs.counted');
  const answer = await new Promise((resolve, reject) => {
    const sock = net.connect(rt.port, '127.0.0.1');
    let data = '';
    sock.on('data', (c) => (data += c));
    sock.on('end', () => resolve(data));
    sock.on('error', reject);
    sock.write('POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n');
  });
  assert.match(answer, /^HTTP\/1\.1 400 /);
  assert.match(answer, /"error":"BadRequest"/);
  assert.equal(fs.existsSync(marker), false, 'user code ran for a malformed request');
});

test('every method reaches the function; HEAD has no body', async () => {
  const rt = await start('funcs.echo');
  for (const method of ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']) {
    const res = await rt.request(method, '/m');
    assert.equal(res.status, 200, method);
    assert.equal(json(res).method, method);
  }
  const res = await rt.request('HEAD', '/m');
  assert.equal(res.status, 200);
  assert.equal(res.body.length, 0);
  assert.ok(Number(res.headers['content-length']) > 0);
});

// -- errors -----------------------------------------------------------------

test('a thrown error gives 500 naming it, and the function keeps serving', async () => {
  const rt = await start('funcs.boom');
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  try {
    let res = await rt.request('GET', '/boom', { agent });
    assert.equal(res.status, 500);
    const err = json(res);
    assert.equal(err.error, 'TypeError');
    assert.match(err.message, /Cannot read properties of null/);
    assert.match(err.traceback, /TypeError/);
    assert.match(err.traceback, /funcs\.js/);
    res = await rt.request('GET', '/fine', { agent });
    assert.deepEqual([res.status, res.body.toString()], [200, 'still alive']);
    res = await rt.request('GET', '/fine');
    assert.deepEqual([res.status, res.body.toString()], [200, 'still alive']);
  } finally {
    agent.destroy();
  }
  assert.match(rt.stderr, /TypeError: Cannot read properties of null/);
});

test('a rejected promise and a thrown string give 500', async () => {
  let rt = await start('funcs.rejects');
  let res = await rt.request('GET', '/');
  assert.equal(res.status, 500);
  let err = json(res);
  assert.equal(err.error, 'QuotaExceeded');
  assert.equal(err.message, 'over the limit');

  rt = await start('funcs.throwsString');
  res = await rt.request('GET', '/');
  assert.equal(res.status, 500);
  err = json(res);
  assert.equal(err.error, 'String');
  assert.equal(err.message, 'plain string');
});

test('a result that cannot be mapped gives 500', async () => {
  const cases = [
    ['funcs.notSerialisable', 'TypeError'],
    ['funcs.notFinite', 'TypeError'],
    ['funcs.badStatus', 'InvalidResponse'],
    ['funcs.badHeader', 'InvalidResponse'],
  ];
  for (const [entrypoint, error] of cases) {
    const rt = await start(entrypoint);
    const res = await rt.request('GET', '/');
    assert.equal(res.status, 500, entrypoint);
    const body = json(res);
    assert.equal(body.error, error, entrypoint);
    assert.equal(res.headers.injected, undefined);
  }
});

test('a module that fails to load exits 3 with the error', async () => {
  let rt = await start('broken.handle', { healthy: false });
  assert.equal(await rt.waitExit(), 3);
  assert.match(rt.stderr, /sless-no-such-module-for-tests/);
  assert.match(rt.stderr, /Cannot find module/);

  rt = await start('throws_at_load.handle', { healthy: false });
  assert.equal(await rt.waitExit(), 3);
  assert.match(rt.stderr, /RangeError: refusing to load/);
});

test('a missing module, export or non-function exits 3', async () => {
  const cases = [
    ['nosuchmodule.handle', /no module file \(tried nosuchmodule\.js/],
    ['funcs.noSuchFunction', /exports no "noSuchFunction"/],
    ['funcs.notAFunction', /is a String, not a function/],
    ['nodot', /not of the form module\.function/],
  ];
  for (const [entrypoint, why] of cases) {
    const rt = await start(entrypoint, { healthy: false });
    assert.equal(await rt.waitExit(), 3, entrypoint);
    assert.match(rt.stderr, why, entrypoint);
  }
});

test('bad configuration exits 2, a port in use exits 4', async () => {
  let rt = await start('funcs.text', { healthy: false, env: { SLESS_PORT: 'eighty' } });
  assert.equal(await rt.waitExit(), 2);
  assert.match(rt.stderr, /SLESS_PORT "eighty" is not a port number/);

  rt = await start('funcs.text', { healthy: false, env: { SLESS_CODE_DIR: path.join(tmp, 'missing') } });
  assert.equal(await rt.waitExit(), 2);

  const busy = await start('funcs.text');
  rt = new Runtime(busy.port, 'funcs.text');
  running.push(rt);
  assert.equal(await rt.waitExit(), 4);
  assert.match(rt.stderr, /cannot listen on 127\.0\.0\.1/);
});

test('it serves on a listening socket it inherited', async () => {
  // The socket is the starter's: bound and listening before the wrapper
  // starts, handed over as descriptor 3. The test gives up its own copy
  // at once, so only the wrapper accepts.
  const holder = net.createServer();
  await new Promise((resolve) => holder.listen({ host: '127.0.0.1', port: 0 }, resolve));
  const { port } = holder.address();
  const proc = spawn(process.execPath, [WRAPPER], {
    cwd: tmp,
    env: {
      ...process.env,
      SLESS_PORT: '',
      SLESS_LISTEN_FD: '3',
      SLESS_CODE_DIR: path.join(tmp, 'code'),
      SLESS_ENTRYPOINT: 'funcs.text',
    },
    stdio: ['ignore', 'ignore', 'pipe', holder._handle],
  });
  let stderr = '';
  proc.stderr.on('data', (c) => { stderr += c; });
  const exited = new Promise((resolve) => proc.on('exit', resolve));
  await new Promise((resolve) => holder.close(resolve));
  try {
    const rt = Object.create(Runtime.prototype);
    rt.port = port;
    // The socket listens from the start: the call waits in its backlog
    // until the wrapper accepts it.
    const res = await rt.request('GET', '/');
    assert.deepEqual([res.status, res.body.toString()], [200, 'hello text'], stderr);
  } finally {
    proc.kill('SIGKILL');
    await exited;
  }
});

test('SLESS_LISTEN_FD that is no socket exits 4', async () => {
  const rt = await start('funcs.text', { healthy: false, env: { SLESS_LISTEN_FD: '2' } });
  assert.equal(await rt.waitExit(), 4);
  assert.match(rt.stderr, /cannot serve on SLESS_LISTEN_FD 2/);
});

// -- reserved paths and lifecycle ---------------------------------------------

test('the health path does not call the function', async () => {
  fs.rmSync(marker, { force: true });
  const rt = await start('funcs.counted'); // start() already polled the health path
  for (let i = 0; i < 3; i++) {
    const res = await rt.request('GET', '/__sless/health');
    assert.equal(res.status, 200);
    assert.deepEqual(json(res), { status: 'ok' });
  }
  let res = await rt.request('POST', '/__sless/health');
  assert.equal(res.status, 405);
  assert.equal(res.headers.allow, 'GET, HEAD');
  res = await rt.request('GET', '/__sless/other');
  assert.equal(res.status, 404);
  assert.equal(fs.existsSync(marker), false, 'user code ran for a reserved path');
  const named = await start('funcs.text', { env: { SLESS_INSTANCE: 'a1b2' } });
  assert.deepEqual(json(await named.request('GET', '/__sless/health')), { status: 'ok', instance: 'a1b2' });
  res = await rt.request('GET', '/real');
  assert.deepEqual([res.status, res.body.toString()], [200, 'counted']);
  assert.equal(fs.readFileSync(marker, 'utf8'), '/real\n');
});

test('SIGTERM lets a running request finish, then exits 0', async () => {
  const rt = await start('funcs.slow');
  const pending = rt.request('GET', '/slow');
  await sleep(100);
  rt.proc.kill('SIGTERM');
  const res = await pending;
  assert.deepEqual([res.status, res.body.toString()], [200, 'finished']);
  assert.equal(await rt.waitExit(), 0);
});

test('one access log line per request, without the query string', async () => {
  const rt = await start('funcs.text');
  await rt.request('POST', '/logged?secret=1', { body: 'x' });
  rt.proc.kill('SIGTERM');
  await rt.waitExit();
  const lines = rt.stderr.split('\n').filter((l) => l.startsWith('POST /logged '));
  assert.equal(lines.length, 1, rt.stderr);
  const [, , status, duration] = lines[0].split(' ');
  assert.equal(status, '200');
  assert.match(duration, /^[0-9]+\.[0-9]{2}ms$/);
  assert.doesNotMatch(rt.stderr, /secret/);
});

// -- output and the call that printed it ------------------------------------

/** The lines of `text` marked with `id`, without the mark. */
function marked(text, id) {
  const mark = `\x1e${id}\x1f`;
  return text.split('\n').filter((l) => l.startsWith(mark)).map((l) => l.slice(mark.length));
}

function unmarked(text) {
  return text.split('\n').slice(0, -1).filter((l) => !l.startsWith('\x1e'));
}

// A call that never ends (a write whose callback is lost) fails its test.
const CALL_DEADLINE_MS = 20000;

function call(rt, target, id) {
  return rt.request('GET', target, { headers: { 'Sless-Invocation-Id': id } });
}

test("a call's lines are marked with its id on their own stream", { timeout: CALL_DEADLINE_MS }, async () => {
  const rt = await start('marks.prints');
  const id = randomUUID();
  const res = await call(rt, '/', id.toUpperCase());
  assert.deepEqual([res.status, res.body.toString()], [200, 'printed']);
  const expected = ['to stdout', 'two', 'lines', 'bytes', 'after a timer'];
  await rt.waitFor(() => marked(rt.stdout, id).length === expected.length && rt.stderr.includes('GET / 200'));
  assert.deepEqual(marked(rt.stdout, id), expected);
  assert.deepEqual(marked(rt.stderr, id), ['to stderr']);
  // Printed at load, or by the wrapper (the access log): unmarked. The line
  // the load left open is ended before the first marked line.
  assert.deepEqual(unmarked(rt.stdout), ['imported marks', 'import left its line open']);
  assert.match(unmarked(rt.stderr).join('\n'), /GET \/ 200 /);
  assert.equal(rt.stdout.split('\x1e').length - 1, expected.length);
});

test("a call's traceparent follows its id in the mark", { timeout: CALL_DEADLINE_MS }, async () => {
  const rt = await start('marks.prints');
  const [id, other] = [randomUUID(), randomUUID()];
  const tp = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
  for (const [i, t] of [[id, tp], [other, tp.toUpperCase()]]) {
    const res = await rt.request('GET', '/', { headers: { 'Sless-Invocation-Id': i, traceparent: t } });
    assert.equal(res.status, 200);
  }
  await rt.waitFor(() => rt.stdout.split('after a timer\n').length === 3);
  assert.equal(marked(rt.stdout, `${id};${tp}`)[0], 'to stdout', rt.stdout);
  // One that is not well formed is left out; the id stays.
  assert.equal(marked(rt.stdout, other)[0], 'to stdout', rt.stdout);
});

test('a header that is no UUID leaves the lines unmarked', { timeout: CALL_DEADLINE_MS }, async () => {
  const rt = await start('marks.prints');
  for (const value of ['not-a-uuid', randomUUID().slice(0, -1), randomUUID() + '0']) {
    const res = await call(rt, '/', value);
    assert.equal(res.status, 200);
  }
  await rt.waitFor(() => rt.stdout.split('after a timer\n').length === 4);
  assert.equal(rt.stdout.split('after a timer\n').length, 4, rt.stdout);
  assert.ok(!(rt.stdout + rt.stderr).includes('\x1e'), rt.stdout);
});

test("a partial line is written at the call's end, and past 16 KiB", { timeout: CALL_DEADLINE_MS }, async () => {
  const rt = await start('marks.partial');
  const id = randomUUID();
  const res = await call(rt, '/', id);
  assert.deepEqual([res.status, res.body.toString()], [200, 'boolean']);
  await rt.waitFor(() => marked(rt.stdout, id).length === 2);
  assert.deepEqual(marked(rt.stdout, id), ['y'.repeat(20000), 'x']);
});

test('concurrent calls get only their own ids', { timeout: CALL_DEADLINE_MS }, async () => {
  const rt = await start('marks.together');
  const ids = { 1: randomUUID(), 2: randomUUID() };
  const answers = await Promise.all(['1', '2'].map((n) => call(rt, `/?n=${n}`, ids[n])));
  assert.deepEqual(answers.map((r) => r.body.toString()), ['1', '2']);
  await rt.waitFor(() => marked(rt.stdout, ids[1]).length + marked(rt.stdout, ids[2]).length === 6);
  for (const n of ['1', '2']) {
    assert.deepEqual(marked(rt.stdout, ids[n]), [`a-${n}`, `b-${n}-end`, `c-${n}`], rt.stdout);
  }
  // Interleaved in time: each call's first line came before either's second.
  const lines = rt.stdout.split('\n');
  const first = Math.max(...['1', '2'].map((n) => lines.indexOf(`\x1e${ids[n]}\x1fa-${n}`)));
  const second = lines.findIndex((l) => l.includes('\x1fb-'));
  assert.ok(first < second, rt.stdout);
});

test("a failure's stack is marked with the call's id", { timeout: CALL_DEADLINE_MS }, async () => {
  const rt = await start('marks.fails');
  const id = randomUUID();
  const res = await call(rt, '/', id);
  assert.equal(res.status, 500);
  const { traceback } = json(res);
  await rt.waitFor(() => marked(rt.stderr, id).length > 1 && marked(rt.stdout, id).length > 0);
  const lines = marked(rt.stderr, id);
  assert.deepEqual(lines.slice(0, 1), ['sless: GET / raised:'], rt.stderr);
  assert.equal(lines.slice(1).join('\n') + '\n', traceback);
  assert.match(lines[1], /^RangeError: no such record/);
  assert.doesNotMatch(unmarked(rt.stderr).join('\n'), /RangeError/);
  assert.deepEqual(marked(rt.stdout, id), ['before the failure']);
});

// -- job mode ---------------------------------------------------------------

/** Runs the wrapper with `--job`, `input` on stdin; resolves once it exited. */
function runJob(entrypoint, input, { args = ['--job'], env = {} } = {}) {
  return new Promise((resolve, reject) => {
    const proc = spawn(process.execPath, [WRAPPER, ...args], {
      cwd: tmp,
      env: { ...process.env, SLESS_CODE_DIR: path.join(tmp, 'code'), SLESS_ENTRYPOINT: entrypoint, ...env },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    const out = [];
    const err = [];
    proc.stdout.on('data', (c) => out.push(c));
    proc.stderr.on('data', (c) => err.push(c));
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error(`job ${entrypoint} did not exit within ${EXIT_DEADLINE_MS} ms`));
    }, EXIT_DEADLINE_MS);
    proc.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({
        code: code === null ? signal : code,
        stdout: Buffer.concat(out).toString('utf8'),
        stderr: Buffer.concat(err).toString('utf8'),
      });
    });
    proc.stdin.on('error', () => {});
    proc.stdin.end(typeof input === 'string' ? input : JSON.stringify(input));
  });
}

function jobEvent(value) {
  return { method: 'JOB', path: '/', query: {}, headers: {}, body: JSON.stringify(value), json: value };
}

function lastLine(stdout) {
  const lines = stdout.trimEnd().split('\n');
  return JSON.parse(lines[lines.length - 1]);
}

test('job mode: SLESS_JOB=1 with the event in the file SLESS_JOB_EVENT_FILE names, as a cluster runs it', async () => {
  const input = { n: '$(HOME)', big: 'x'.repeat(200000) };
  const file = path.join(tmp, 'event.json');
  fs.writeFileSync(file, JSON.stringify(jobEvent(input)));
  let run = await runJob('jobs.echoInput', '', { args: [], env: { SLESS_JOB: '1', SLESS_JOB_EVENT_FILE: file } });
  assert.equal(run.code, 0, run.stderr);
  assert.deepEqual(lastLine(run.stdout), { ok: true, input, method: 'JOB' });
  // The file wins over stdin.
  run = await runJob('jobs.echoInput', jobEvent('stdin'), { env: { SLESS_JOB_EVENT_FILE: file } });
  assert.equal(lastLine(run.stdout).input.n, '$(HOME)');
});

test('job mode: an event file that is missing or not JSON exits 2, naming it', async () => {
  const missing = path.join(tmp, 'nowhere.json');
  const garbled = path.join(tmp, 'garbled.json');
  fs.writeFileSync(garbled, '{not json');
  for (const [file, what] of [[missing, /cannot be read/], [garbled, /is not JSON/]]) {
    const run = await runJob('jobs.text', '{}', { env: { SLESS_JOB_EVENT_FILE: file } });
    assert.equal(run.code, 2, file);
    assert.match(run.stderr, /SLESS_JOB_EVENT_FILE/);
    assert.ok(run.stderr.includes(file), run.stderr);
    assert.match(run.stderr, what);
  }
  // The inline variable is gone: it is no event.
  const run = await runJob('jobs.text', '{not json', { env: { SLESS_JOB_EVENT: '{}' } });
  assert.equal(run.code, 2);
  assert.match(run.stderr, /the event on stdin is not JSON/);
});

test('job mode: the result is the last stdout line as JSON', async () => {
  const run = await runJob('jobs.echoInput', jobEvent({ n: [1, 2] }));
  assert.equal(run.code, 0, run.stderr);
  assert.deepEqual(lastLine(run.stdout), { ok: true, input: { n: [1, 2] }, method: 'JOB' });
});

test('job mode: return values map to JSON', async () => {
  const cases = [
    ['jobs.text', 'done'],
    ['jobs.status', { statusCode: 201, headers: { 'X-A': 'b' }, body: 'made' }],
    ['jobs.raw', 'caf\u00e9'],
    ['jobs.nothing', null],
    ['esm.handle', { from: 'esm', method: 'JOB' }],
  ];
  for (const [entrypoint, expected] of cases) {
    const run = await runJob(entrypoint, jobEvent(null));
    assert.equal(run.code, 0, `${entrypoint}: ${run.stderr}`);
    assert.deepEqual(lastLine(run.stdout), expected, entrypoint);
  }
});

test('job mode: the result starts on a line of its own', async () => {
  const run = await runJob('jobs.chatty', jobEvent({}));
  assert.equal(run.code, 0, run.stderr);
  assert.equal(run.stdout, 'first line\nno newline at the end\n[1,2]\n');
  assert.match(run.stderr, /to stderr/);
});

test('job mode: timers the function left running do not keep it alive', async () => {
  const run = await runJob('jobs.lingers', jobEvent({}));
  assert.equal(run.code, 0, run.stderr);
  assert.equal(lastLine(run.stdout), 'returned');
});

test('job mode: a rejection exits 1 with the stack on stderr', async () => {
  const run = await runJob('jobs.rejects', jobEvent({}));
  assert.equal(run.code, 1);
  assert.match(run.stderr, /Error: over the limit/);
  assert.match(run.stderr, /at exports\.rejects \(.*jobs\.js/);
  assert.equal(run.stdout, '');
});

test('job mode: process.exit in the function is the exit code', async () => {
  const run = await runJob('jobs.exits', jobEvent({}));
  assert.equal(run.code, 3);
});

test('job mode: a result JSON cannot hold exits 1', async () => {
  const run = await runJob('jobs.notSerialisable', jobEvent({}));
  assert.equal(run.code, 1);
  assert.match(run.stderr, /BigInt/);
});

test('job mode: an entrypoint that cannot load exits 3, bad input exits 2', async () => {
  let run = await runJob('broken.handle', jobEvent({}));
  assert.equal(run.code, 3);
  assert.match(run.stderr, /Cannot find module/);
  run = await runJob('jobs.text', '{not json');
  assert.equal(run.code, 2);
  assert.match(run.stderr, /not JSON/);
});

// -- pool mode --------------------------------------------------------------

test('pool mode: a pooled wrapper serves what its line names', async () => {
  const rt = await start('funcs.envVar', { pool: true, env: { GREETING: 'from the line' } });
  const res = await rt.request('GET', '/');
  assert.equal(res.status, 200, rt.stderr);
  assert.equal(res.body.toString('utf8'), 'from the line');
});

test('pool mode: a pooled job gets its event after the line', async () => {
  const line = JSON.stringify({
    env: { SLESS_CODE_DIR: path.join(tmp, 'code'), SLESS_ENTRYPOINT: 'jobs.echoInput' },
    job: true,
  });
  const ran = await runJob('unused.unused', `${line}\n${JSON.stringify(jobEvent({ n: 7 }))}`, {
    args: ['--pool'],
    env: { SLESS_CODE_DIR: '', SLESS_ENTRYPOINT: '' },
  });
  assert.equal(ran.code, 0, ran.stderr);
  assert.deepEqual(lastLine(ran.stdout).input, { n: 7 });
});

test('pool mode: a closed pool exits 0, a bad line exits 2', async () => {
  for (const [given, code] of [['', 0], ['not json\n', 2], ['{"env": {"A": 1}}\n', 2], ['[1]\n', 2]]) {
    const ran = await runJob('unused.unused', given, { args: ['--pool'] });
    assert.equal(ran.code, code, `${JSON.stringify(given)}: ${ran.stderr}`);
  }
});
