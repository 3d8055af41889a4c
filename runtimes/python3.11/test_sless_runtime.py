"""Tests for sless_runtime.py (standard library unittest only).

Run from the repository root (or anywhere else) with either of:
    python3 runtimes/python3.11/test_sless_runtime.py -v
    python3 -m unittest discover -s runtimes/python3.11 -v
(`python3 -m unittest runtimes/python3.11/test_sless_runtime.py` cannot work:
unittest turns the path into the module name runtimes.python3.11.test_...,
and the dot in "python3.11" is not importable.)

Each test starts the wrapper as a subprocess against small function modules
written to a temporary directory, on a free loopback port.
"""

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import unittest
import uuid

WRAPPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sless_runtime.py")

STARTUP_DEADLINE_S = 10.0
POLL_INTERVAL_S = 0.02
EXIT_DEADLINE_S = 10.0

# Function modules written to the code directory. MARKER_FILE is replaced
# with the path of a file the `counted` function appends to on every call.
MODULES = {
    "funcs.py": '''
        import json

        MARKER_FILE = None  # set below

        def text(event):
            return "hello text"

        def as_dict(event):
            return {"greeting": "hi", "n": 1}

        def as_list(event):
            return [1, "two", {"three": 3}]

        def status(event):
            return {
                "statusCode": 201,
                "headers": {"X-Custom": "yes", "Location": "/things/1"},
                "body": {"created": True},
            }

        def status_text(event):
            return {"statusCode": 202, "headers": {"Content-Type": "text/csv"}, "body": "a,b\\n"}

        def as_bytes(event):
            return b"\\x00\\x01\\xff"

        def nothing(event):
            return None

        def number(event):
            return 42

        def echo(event):
            return event

        def boom(event):
            if event["path"] == "/boom":
                return 1 / 0
            return "still alive"

        def not_serialisable(event):
            return {"value": object()}

        def env_var(event):
            import os
            return os.environ.get("GREETING", "unset").encode("utf-8")

        def counted(event):
            with open(MARKER_FILE, "a") as f:
                f.write(event["path"] + "\\n")
            return "counted"
    ''',
    "broken.py": '''
        import sless_no_such_module_for_tests  # ImportError at import time

        def handle(event):
            return "unreachable"
    ''',
    "jobs.py": '''
        import sys

        def echo_input(event):
            return {"ok": True, "input": event["json"], "method": event["method"]}

        def text(event):
            return "done"

        def status(event):
            return {"statusCode": 201, "headers": {"X-A": "b"}, "body": "made"}

        def raw(event):
            return b"caf\\xc3\\xa9 \\xff"

        def nothing(event):
            return None

        def chatty(event):
            print("first line")
            sys.stdout.write("no newline at the end")
            print("to stderr", file=sys.stderr)
            return [1, 2]

        def fails(event):
            raise LookupError("no such record")

        def exits(event):
            sys.exit(3)

        def nan(event):
            return float("nan")
    ''',
    "marks.py": '''
        import asyncio
        import sys
        import threading

        print("imported marks")
        sys.stdout.write("import left its line open")

        def prints(event):
            print("to stdout")
            print("to stderr", file=sys.stderr)
            sys.stdout.write("two\\nlines\\n")
            print("flushed", flush=True)

            async def task():
                print("from a task")

            asyncio.run(task())
            thread = threading.Thread(target=print, args=("from a thread",))
            thread.start()
            thread.join()
            # The rest of the streams is theirs.
            assert (sys.stdout.fileno(), sys.stderr.fileno()) == (1, 2)
            assert sys.stdout.encoding and sys.stdout.buffer and not sys.stdout.isatty()
            return "printed"

        def partial(event):
            sys.stdout.write("y" * 20000)
            sys.stdout.write("x")
            return "partial"

        # Two calls meet here twice: each writes while the other is in flight.
        _gate = threading.Barrier(2, timeout=10)

        def together(event):
            n = event["query"]["n"]
            print("a-%s" % n)
            sys.stdout.write("b-%s-" % n)
            _gate.wait()
            print("end")
            _gate.wait()
            print("c-%s" % n)
            return n

        def fails(event):
            print("before the failure")
            raise LookupError("no such record")
    ''',
    "pkg/__init__.py": "",
    "pkg/mod.py": '''
        import depmod

        def func(event):
            return {"from": "pkg.mod", "dep": depmod.VALUE}
    ''',
}

DEPS = {
    "depmod.py": 'VALUE = "from deps dir"\n',
}


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_tree(root, files):
    for rel, content in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(textwrap.dedent(content))


class Runtime:
    """One wrapper process serving one entrypoint."""

    def __init__(self, tmp, entrypoint, deps=True, extra_env=None, pool=False):
        self.port = free_port()
        self.stderr_path = os.path.join(tmp, "stderr-%s-%d.log" % (entrypoint, self.port))
        self._stderr = open(self.stderr_path, "wb")
        self.stdout_path = os.path.join(tmp, "stdout-%s-%d.log" % (entrypoint, self.port))
        self._stdout = open(self.stdout_path, "wb")
        env = dict(os.environ)
        env.update(
            SLESS_PORT=str(self.port),
            SLESS_HOST="127.0.0.1",
            SLESS_CODE_DIR=os.path.join(tmp, "code"),
            SLESS_ENTRYPOINT=entrypoint,
        )
        env.pop("PYTHONPATH", None)
        env.pop("SLESS_INSTANCE", None)
        env.update(extra_env or {})
        if deps:
            env["SLESS_DEPS_DIR"] = os.path.join(tmp, "deps")
        else:
            env.pop("SLESS_DEPS_DIR", None)
        if pool:
            # Started with none of it: the pool's line hands it over.
            given = {k: v for k, v in env.items() if k.startswith("SLESS_") or k in (extra_env or {})}
            env = {k: v for k, v in env.items() if k not in given}
        self.proc = subprocess.Popen(
            [sys.executable, WRAPPER] + (["--pool"] if pool else []),
            env=env,
            cwd=tmp,
            stdin=subprocess.PIPE if pool else subprocess.DEVNULL,
            stdout=self._stdout,
            stderr=self._stderr,
        )
        if pool:
            self.proc.stdin.write(json.dumps({"env": given}).encode("utf-8") + b"\n")
            self.proc.stdin.close()

    def stderr_text(self):
        with open(self.stderr_path, "r", encoding="utf-8", errors="replace") as f:
            return f.read()

    def stdout_text(self):
        with open(self.stdout_path, "r", encoding="utf-8", errors="replace") as f:
            return f.read()

    def wait_healthy(self):
        deadline = time.monotonic() + STARTUP_DEADLINE_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(
                    "wrapper exited with %s before becoming healthy:\n%s"
                    % (self.proc.returncode, self.stderr_text())
                )
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1)
                try:
                    conn.request("GET", "/__sless/health")
                    resp = conn.getresponse()
                    resp.read()
                    if resp.status == 200:
                        return
                finally:
                    conn.close()
            except OSError:
                pass
            time.sleep(POLL_INTERVAL_S)
        raise AssertionError(
            "wrapper not healthy after %.0fs:\n%s" % (STARTUP_DEADLINE_S, self.stderr_text())
        )

    def wait_exit(self):
        try:
            return self.proc.wait(timeout=EXIT_DEADLINE_S)
        except subprocess.TimeoutExpired:
            raise AssertionError("wrapper did not exit within %.0fs" % EXIT_DEADLINE_S)

    def connection(self):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)

    def request(self, method, path, body=None, headers=None, conn=None):
        own = conn is None
        conn = conn or self.connection()
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            data = resp.read()
            return resp, data
        finally:
            if own:
                conn.close()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=EXIT_DEADLINE_S)
        self._stderr.close()
        self._stdout.close()


class RuntimeTestCase(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="sless-runtime-test-")
        code = os.path.join(cls.tmp, "code")
        write_tree(code, MODULES)
        write_tree(os.path.join(cls.tmp, "deps"), DEPS)
        cls.marker = os.path.join(cls.tmp, "calls.txt")
        with open(os.path.join(code, "funcs.py"), "a", encoding="utf-8") as f:
            f.write("\nMARKER_FILE = %r\n" % cls.marker)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def start(self, entrypoint, healthy=True, deps=True, extra_env=None, pool=False):
        rt = Runtime(self.tmp, entrypoint, deps=deps, extra_env=extra_env, pool=pool)
        self.addCleanup(rt.stop)
        if healthy:
            rt.wait_healthy()
        return rt

    def assertJSON(self, resp, data):
        self.assertEqual(resp.getheader("Content-Type"), "application/json")
        self.assertEqual(resp.getheader("Content-Length"), str(len(data)))
        return json.loads(data.decode("utf-8"))


class ReturnMappingTest(RuntimeTestCase):
    def test_str_is_text_plain(self):
        rt = self.start("funcs.text")
        resp, data = rt.request("GET", "/")
        self.assertEqual(resp.status, 200)
        self.assertEqual(resp.getheader("Content-Type"), "text/plain; charset=utf-8")
        self.assertEqual(resp.getheader("Content-Length"), str(len(data)))
        self.assertEqual(data, b"hello text")

    def test_dict_is_json(self):
        rt = self.start("funcs.as_dict")
        resp, data = rt.request("POST", "/anything", body=b"ignored")
        self.assertEqual(resp.status, 200)
        self.assertEqual(self.assertJSON(resp, data), {"greeting": "hi", "n": 1})

    def test_list_is_json(self):
        rt = self.start("funcs.as_list")
        resp, data = rt.request("GET", "/")
        self.assertEqual(resp.status, 200)
        self.assertEqual(self.assertJSON(resp, data), [1, "two", {"three": 3}])

    def test_status_code_form(self):
        rt = self.start("funcs.status")
        resp, data = rt.request("PUT", "/things")
        self.assertEqual(resp.status, 201)
        self.assertEqual(resp.getheader("X-Custom"), "yes")
        self.assertEqual(resp.getheader("Location"), "/things/1")
        self.assertEqual(self.assertJSON(resp, data), {"created": True})

    def test_status_code_form_keeps_given_content_type(self):
        rt = self.start("funcs.status_text")
        resp, data = rt.request("GET", "/")
        self.assertEqual(resp.status, 202)
        self.assertEqual(resp.getheader("Content-Type"), "text/csv")
        self.assertEqual(data, b"a,b\n")

    def test_bytes_none_and_scalars(self):
        rt = self.start("funcs.as_bytes")
        resp, data = rt.request("GET", "/")
        self.assertEqual(resp.status, 200)
        self.assertEqual(resp.getheader("Content-Type"), "application/octet-stream")
        self.assertEqual(data, b"\x00\x01\xff")

        rt = self.start("funcs.nothing")
        resp, data = rt.request("DELETE", "/x")
        self.assertEqual(resp.status, 204)
        self.assertEqual(data, b"")

        rt = self.start("funcs.number")
        resp, data = rt.request("GET", "/")
        self.assertEqual(resp.status, 200)
        self.assertEqual(self.assertJSON(resp, data), 42)

    def test_dotted_module_and_deps_dir(self):
        rt = self.start("pkg.mod.func")
        resp, data = rt.request("GET", "/")
        self.assertEqual(resp.status, 200)
        self.assertEqual(
            self.assertJSON(resp, data), {"from": "pkg.mod", "dep": "from deps dir"}
        )


class EventTest(RuntimeTestCase):
    def test_query_headers_and_json(self):
        rt = self.start("funcs.echo")
        body = json.dumps({"name": "ada", "n": [1, 2]}).encode("utf-8")
        resp, data = rt.request(
            "PATCH",
            "/some/path?a=1&b=two%20words&a=3&empty=",
            body=body,
            headers={"Content-Type": "application/json", "X-Test-Header": "Value-1"},
        )
        self.assertEqual(resp.status, 200)
        event = self.assertJSON(resp, data)
        self.assertEqual(event["method"], "PATCH")
        self.assertEqual(event["path"], "/some/path")
        self.assertEqual(event["query"], {"a": "3", "b": "two words", "empty": ""})
        self.assertEqual(event["headers"]["x-test-header"], "Value-1")
        self.assertEqual(event["headers"]["content-type"], "application/json")
        self.assertTrue(all(k == k.lower() for k in event["headers"]))
        self.assertEqual(event["body"], body.decode("utf-8"))
        self.assertEqual(event["json"], {"name": "ada", "n": [1, 2]})

    def test_non_json_and_empty_body(self):
        rt = self.start("funcs.echo")
        conn = rt.connection()
        self.addCleanup(conn.close)
        resp, data = rt.request("POST", "/", body=b"not json \xff", conn=conn)
        event = self.assertJSON(resp, data)
        self.assertEqual(event["body"], "not json \ufffd")
        self.assertIsNone(event["json"])
        # Same connection (keep-alive), no body this time.
        resp, data = rt.request("GET", "/again", conn=conn)
        event = self.assertJSON(resp, data)
        self.assertEqual(event["path"], "/again")
        self.assertEqual(event["body"], "")
        self.assertIsNone(event["json"])
        self.assertEqual(event["query"], {})

    def test_chunked_post_body(self):
        rt = self.start("funcs.echo")
        chunks = [b'{"name": ', b'"chunked", ', b'"parts": 3}']
        conn = rt.connection()
        self.addCleanup(conn.close)
        conn.request(
            "POST",
            "/upload",
            body=iter(chunks),
            headers={"Transfer-Encoding": "chunked", "Content-Type": "application/json"},
            encode_chunked=True,
        )
        resp = conn.getresponse()
        data = resp.read()
        self.assertEqual(resp.status, 200)
        event = self.assertJSON(resp, data)
        self.assertEqual(event["body"], b"".join(chunks).decode("utf-8"))
        self.assertEqual(event["json"], {"name": "chunked", "parts": 3})
        # The connection is still usable after the chunked body.
        resp, data = rt.request("GET", "/after", conn=conn)
        self.assertEqual(self.assertJSON(resp, data)["path"], "/after")

    def test_all_methods_reach_the_function(self):
        rt = self.start("funcs.echo")
        for method in ("GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"):
            resp, data = rt.request(method, "/m")
            self.assertEqual(resp.status, 200, method)
            self.assertEqual(self.assertJSON(resp, data)["method"], method)
        resp, data = rt.request("HEAD", "/m")
        self.assertEqual(resp.status, 200)
        self.assertEqual(data, b"")
        self.assertGreater(int(resp.getheader("Content-Length")), 0)


class ErrorTest(RuntimeTestCase):
    def test_exception_gives_500_and_keeps_serving(self):
        rt = self.start("funcs.boom")
        conn = rt.connection()
        self.addCleanup(conn.close)
        resp, data = rt.request("GET", "/boom", conn=conn)
        self.assertEqual(resp.status, 500)
        err = self.assertJSON(resp, data)
        self.assertEqual(err["error"], "ZeroDivisionError")
        self.assertEqual(err["message"], "division by zero")
        self.assertIn("ZeroDivisionError", err["traceback"])
        self.assertIn("funcs.py", err["traceback"])
        # A following request, on the same and on a new connection, succeeds.
        resp, data = rt.request("GET", "/fine", conn=conn)
        self.assertEqual((resp.status, data), (200, b"still alive"))
        resp, data = rt.request("GET", "/fine")
        self.assertEqual((resp.status, data), (200, b"still alive"))
        self.assertIn("ZeroDivisionError", rt.stderr_text())

    def test_unserialisable_result_gives_500(self):
        rt = self.start("funcs.not_serialisable")
        resp, data = rt.request("GET", "/")
        self.assertEqual(resp.status, 500)
        self.assertEqual(self.assertJSON(resp, data)["error"], "TypeError")

    def test_import_failure_exits_3_with_traceback(self):
        rt = self.start("broken.handle", healthy=False)
        self.assertEqual(rt.wait_exit(), 3)
        err = rt.stderr_text()
        self.assertIn("Traceback (most recent call last)", err)
        self.assertIn("sless_no_such_module_for_tests", err)
        self.assertIn("ModuleNotFoundError", err)

    def test_missing_attribute_exits_3(self):
        rt = self.start("funcs.no_such_function", healthy=False)
        self.assertEqual(rt.wait_exit(), 3)
        self.assertIn("AttributeError", rt.stderr_text())

    def test_missing_dependency_without_deps_dir_exits_3(self):
        rt = self.start("pkg.mod.func", healthy=False, deps=False)
        self.assertEqual(rt.wait_exit(), 3)
        self.assertIn("depmod", rt.stderr_text())


class JobModeTest(RuntimeTestCase):
    """``--job``: the event on stdin, one call, the result on stdout."""

    def run_job(self, entrypoint, event, deps=True, stdin=None, extra_env=None, args=("--job",)):
        env = {
            k: v for k, v in os.environ.items() if not k.startswith("SLESS_")
        }
        env.update(
            SLESS_CODE_DIR=os.path.join(self.tmp, "code"),
            SLESS_ENTRYPOINT=entrypoint,
        )
        env.update(extra_env or {})
        if deps:
            env["SLESS_DEPS_DIR"] = os.path.join(self.tmp, "deps")
        data = stdin if stdin is not None else json.dumps(event).encode("utf-8")
        return subprocess.run(
            [sys.executable, WRAPPER, *args],
            input=data,
            capture_output=True,
            env=env,
            timeout=EXIT_DEADLINE_S,
        )

    @staticmethod
    def job_event(value):
        return {
            "method": "JOB",
            "path": "/",
            "query": {},
            "headers": {},
            "body": json.dumps(value),
            "json": value,
        }

    def last_line(self, proc):
        return json.loads(proc.stdout.decode("utf-8").splitlines()[-1])

    def test_result_is_the_last_stdout_line_as_json(self):
        proc = self.run_job("jobs.echo_input", self.job_event({"n": [1, 2]}))
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(
            self.last_line(proc), {"ok": True, "input": {"n": [1, 2]}, "method": "JOB"}
        )

    def test_return_values_map_to_json(self):
        cases = {
            "jobs.text": "done",
            "jobs.status": {"statusCode": 201, "headers": {"X-A": "b"}, "body": "made"},
            "jobs.raw": "caf\u00e9 \ufffd",
            "jobs.nothing": None,
            "pkg.mod.func": {"from": "pkg.mod", "dep": "from deps dir"},
        }
        for entrypoint, expected in cases.items():
            with self.subTest(entrypoint=entrypoint):
                proc = self.run_job(entrypoint, self.job_event(None))
                self.assertEqual(proc.returncode, 0, proc.stderr)
                self.assertEqual(self.last_line(proc), expected)

    def test_result_starts_on_a_line_of_its_own(self):
        proc = self.run_job("jobs.chatty", self.job_event({}))
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(
            proc.stdout.decode("utf-8"),
            "first line\nno newline at the end\n[1, 2]\n",
        )
        self.assertIn("to stderr", proc.stderr.decode("utf-8"))

    def test_exception_exits_1_with_the_traceback_on_stderr(self):
        proc = self.run_job("jobs.fails", self.job_event({}))
        self.assertEqual(proc.returncode, 1)
        err = proc.stderr.decode("utf-8")
        self.assertIn("Traceback (most recent call last)", err)
        self.assertIn("LookupError: no such record", err)
        self.assertNotIn("run_job", err)
        self.assertEqual(proc.stdout, b"")

    def test_sys_exit_in_the_function_is_the_exit_code(self):
        proc = self.run_job("jobs.exits", self.job_event({}))
        self.assertEqual(proc.returncode, 3)

    def test_unserialisable_result_exits_1(self):
        proc = self.run_job("jobs.nan", self.job_event({}))
        self.assertEqual(proc.returncode, 1)
        self.assertIn("ValueError", proc.stderr.decode("utf-8"))

    def test_unloadable_entrypoint_exits_3(self):
        proc = self.run_job("broken.handle", self.job_event({}))
        self.assertEqual(proc.returncode, 3)
        self.assertIn("ModuleNotFoundError", proc.stderr.decode("utf-8"))

    def test_event_that_is_not_json_exits_2(self):
        proc = self.run_job("jobs.text", None, stdin=b"{not json")
        self.assertEqual(proc.returncode, 2)
        self.assertIn("not JSON", proc.stderr.decode("utf-8"))

    def test_sless_job_and_the_event_in_a_file(self):
        # How a cluster's Job runs it: no argument, nothing on stdin, the
        # event in the file SLESS_JOB_EVENT_FILE names.
        event = self.job_event({"n": "$(HOME)", "big": "x" * 200000})
        path = os.path.join(self.tmp, "event.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(event, f)
        proc = self.run_job(
            "jobs.echo_input",
            None,
            stdin=b"",
            args=(),
            extra_env={"SLESS_JOB": "1", "SLESS_JOB_EVENT_FILE": path},
        )
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(
            self.last_line(proc),
            {"ok": True, "input": {"n": "$(HOME)", "big": "x" * 200000}, "method": "JOB"},
        )
        # The file wins over stdin.
        proc = self.run_job(
            "jobs.echo_input",
            None,
            stdin=json.dumps(self.job_event("stdin")).encode("utf-8"),
            extra_env={"SLESS_JOB_EVENT_FILE": path},
        )
        self.assertEqual(self.last_line(proc)["input"]["n"], "$(HOME)")

    def test_an_event_file_that_is_missing_or_not_json_exits_2_naming_it(self):
        missing = os.path.join(self.tmp, "nowhere.json")
        garbled = os.path.join(self.tmp, "garbled.json")
        with open(garbled, "w", encoding="utf-8") as f:
            f.write("{not json")
        for path, what in ((missing, "cannot be read"), (garbled, "is not JSON")):
            proc = self.run_job(
                "jobs.text", None, stdin=b"{}", extra_env={"SLESS_JOB_EVENT_FILE": path}
            )
            self.assertEqual(proc.returncode, 2, path)
            stderr = proc.stderr.decode("utf-8")
            self.assertIn("SLESS_JOB_EVENT_FILE", stderr)
            self.assertIn(path, stderr)
            self.assertIn(what, stderr)
        # The inline variable is gone: it is no event.
        proc = self.run_job(
            "jobs.text", None, stdin=b"{not json", extra_env={"SLESS_JOB_EVENT": "{}"}
        )
        self.assertEqual(proc.returncode, 2)
        self.assertIn("the event on stdin is not JSON", proc.stderr.decode("utf-8"))


# (Not str.splitlines(): it splits at \x1e too.)
def marked(text, invocation_id):
    """The lines of ``text`` marked with ``invocation_id``, without the mark."""
    mark = "\x1e%s\x1f" % invocation_id
    return [l[len(mark):] for l in text.split("\n") if l.startswith(mark)]


def wait_for(read, text):
    """What ``read()`` gives once it holds ``text`` (10 s at most)."""
    deadline = time.monotonic() + 10
    while text not in read() and time.monotonic() < deadline:
        time.sleep(0.01)
    return read()


def unmarked(text):
    return [l for l in text.split("\n")[:-1] if not l.startswith("\x1e")]


class OutputMarkTest(RuntimeTestCase):
    """What a call prints is marked with its Sless-Invocation-Id."""

    def call(self, rt, path, invocation_id):
        resp, data = rt.request("GET", path, headers={"Sless-Invocation-Id": invocation_id})
        return resp.status, data

    def test_a_call_s_lines_are_marked_with_its_id_on_their_own_stream(self):
        rt = self.start("marks.prints")
        call = str(uuid.uuid4())
        self.assertEqual(self.call(rt, "/", call.upper()), (200, b"printed"))
        # The access log and the thread's line may come after the answer.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            out, err = rt.stdout_text(), rt.stderr_text()
            if "from a thread" in out and "GET / 200 " in err:
                break
            time.sleep(0.01)
        self.assertEqual(
            marked(out, call), ["to stdout", "two", "lines", "flushed", "from a task"]
        )
        self.assertEqual(marked(err, call), ["to stderr"])
        # Printed at import, by a thread the call started, or by the
        # wrapper (the access log): unmarked. The line the import left open
        # is ended before the first marked line.
        self.assertEqual(
            unmarked(out), ["imported marks", "import left its line open", "from a thread"]
        )
        self.assertIn("GET / 200 ", "\n".join(unmarked(err)))
        self.assertEqual(out.count("\x1e"), 5, out)

    def test_a_call_s_traceparent_follows_its_id_in_the_mark(self):
        rt = self.start("marks.prints")
        call, tp = str(uuid.uuid4()), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        headers = {"Sless-Invocation-Id": call, "traceparent": tp}
        self.assertEqual(rt.request("GET", "/", headers=headers)[0].status, 200)
        out = wait_for(rt.stdout_text, "from a thread")
        self.assertEqual(marked(out, call + ";" + tp)[0], "to stdout")
        # One that is not well formed is left out; the id stays.
        other = str(uuid.uuid4())
        headers = {"Sless-Invocation-Id": other, "traceparent": tp.upper()}
        self.assertEqual(rt.request("GET", "/", headers=headers)[0].status, 200)
        self.assertEqual(marked(rt.stdout_text(), other)[0], "to stdout")

    def test_a_header_that_is_no_uuid_leaves_the_lines_unmarked(self):
        rt = self.start("marks.prints")
        for value in ("not-a-uuid", str(uuid.uuid4())[:-1], str(uuid.uuid4()) + "0"):
            self.assertEqual(self.call(rt, "/", value), (200, b"printed"))
        self.assertNotIn("\x1e", rt.stdout_text() + rt.stderr_text())
        self.assertEqual(rt.stdout_text().count("to stdout\n"), 3)

    def test_a_partial_line_is_written_at_the_call_s_end_and_past_16_kib(self):
        rt = self.start("marks.partial")
        call = str(uuid.uuid4())
        self.assertEqual(self.call(rt, "/", call), (200, b"partial"))
        self.assertEqual(marked(rt.stdout_text(), call), ["y" * 20000, "x"])

    def test_concurrent_calls_get_only_their_own_ids(self):
        rt = self.start("marks.together")
        calls = {n: str(uuid.uuid4()) for n in ("1", "2")}
        answers = {}

        def call(n):
            answers[n] = self.call(rt, "/?n=" + n, calls[n])

        threads = [threading.Thread(target=call, args=(n,)) for n in calls]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.assertEqual(answers, {"1": (200, b"1"), "2": (200, b"2")})
        out = rt.stdout_text()
        for n, call_id in calls.items():
            self.assertEqual(marked(out, call_id), ["a-" + n, "b-%s-end" % n, "c-" + n], out)
        # Interleaved in time: each call's first line came before either
        # call's second.
        lines = out.split("\n")
        first = max(i for i, l in enumerate(lines) if l.endswith("\x1fa-1") or l.endswith("\x1fa-2"))
        second = min(i for i, l in enumerate(lines) if "\x1fb-" in l)
        self.assertLess(first, second, out)

    def test_a_failure_s_traceback_is_marked_with_the_call_s_id(self):
        rt = self.start("marks.fails")
        call = str(uuid.uuid4())
        status, data = self.call(rt, "/", call)
        self.assertEqual(status, 500)
        traceback_text = json.loads(data)["traceback"]
        lines = marked(rt.stderr_text(), call)
        self.assertEqual(lines[:1], ["sless: GET / raised:"], rt.stderr_text())
        self.assertEqual("\n".join(lines[1:]) + "\n", traceback_text)
        self.assertIn("LookupError: no such record", lines[-1])
        self.assertNotIn("LookupError", "\n".join(unmarked(rt.stderr_text())))
        self.assertEqual(marked(rt.stdout_text(), call), ["before the failure"])


class ReservedPathTest(RuntimeTestCase):
    def test_health_does_not_call_user_code(self):
        if os.path.exists(self.marker):
            os.remove(self.marker)
        rt = self.start("funcs.counted")  # start() already polled /__sless/health
        for _ in range(3):
            resp, data = rt.request("GET", "/__sless/health")
            self.assertEqual(resp.status, 200)
            self.assertEqual(self.assertJSON(resp, data), {"status": "ok"})
        resp, data = rt.request("GET", "/__sless/other")
        self.assertEqual(resp.status, 404)
        named = self.start("funcs.counted", extra_env={"SLESS_INSTANCE": "a1b2"})
        resp, data = named.request("GET", "/__sless/health")
        self.assertEqual(self.assertJSON(resp, data), {"status": "ok", "instance": "a1b2"})
        self.assertFalse(os.path.exists(self.marker), "user code ran for a reserved path")
        resp, data = rt.request("GET", "/real")
        self.assertEqual((resp.status, data), (200, b"counted"))
        with open(self.marker, encoding="utf-8") as f:
            self.assertEqual(f.read(), "/real\n")


class PoolModeTest(RuntimeTestCase):
    """``--pool``: started with nothing to run, told what on stdin."""

    def test_a_pooled_wrapper_serves_what_its_line_names(self):
        rt = self.start("funcs.env_var", pool=True, extra_env={"GREETING": "from the line"})
        resp, data = rt.request("GET", "/")
        self.assertEqual(resp.status, 200, rt.stderr_text())
        self.assertEqual(data, b"from the line")

    def test_a_pooled_wrapper_runs_a_job_with_the_event_after_the_line(self):
        env = {
            "SLESS_CODE_DIR": os.path.join(self.tmp, "code"),
            "SLESS_ENTRYPOINT": "jobs.echo_input",
            "SLESS_DEPS_DIR": os.path.join(self.tmp, "deps"),
        }
        event = JobModeTest.job_event({"n": 7})
        line = json.dumps({"env": env, "job": True}).encode("utf-8")
        proc = subprocess.run(
            [sys.executable, WRAPPER, "--pool"],
            input=line + b"\n" + json.dumps(event).encode("utf-8"),
            capture_output=True,
            env={k: v for k, v in os.environ.items() if not k.startswith("SLESS_")},
            timeout=EXIT_DEADLINE_S,
        )
        self.assertEqual(proc.returncode, 0, proc.stderr)
        last = json.loads(proc.stdout.decode("utf-8").splitlines()[-1])
        self.assertEqual(last["input"], {"n": 7})

    def test_a_closed_pool_exits_0_and_a_bad_line_exits_2(self):
        for given, code in [(b"", 0), (b"not json\n", 2), (b'{"env": {"A": 1}}\n', 2), (b"[1]\n", 2)]:
            proc = subprocess.run(
                [sys.executable, WRAPPER, "--pool"],
                input=given,
                capture_output=True,
                timeout=EXIT_DEADLINE_S,
            )
            self.assertEqual(proc.returncode, code, (given, proc.stderr))


class InheritedListenerTest(RuntimeTestCase):
    """``SLESS_LISTEN_FD``: the socket is its starter's, handed over bound."""

    def serve_on(self, listener):
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLESS_")}
        env.update(
            SLESS_LISTEN_FD=str(listener.fileno()),
            SLESS_CODE_DIR=os.path.join(self.tmp, "code"),
            SLESS_ENTRYPOINT="funcs.text",
        )
        env.pop("PYTHONPATH", None)
        proc = subprocess.Popen(
            [sys.executable, WRAPPER],
            env=env,
            pass_fds=(listener.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        return proc

    def test_it_serves_on_the_socket_it_inherited_and_again_after_a_restart(self):
        listener = socket.socket()
        self.addCleanup(listener.close)
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        port = listener.getsockname()[1]
        for _ in range(2):
            proc = self.serve_on(listener)
            deadline = time.monotonic() + STARTUP_DEADLINE_S
            while True:
                # The socket listens from the start: a call waits in its
                # backlog until the wrapper accepts it.
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=STARTUP_DEADLINE_S)
                try:
                    conn.request("GET", "/")
                    resp = conn.getresponse()
                    data = resp.read()
                    break
                except OSError:
                    self.assertLess(time.monotonic(), deadline, "never answered")
                    time.sleep(POLL_INTERVAL_S)
                finally:
                    conn.close()
            self.assertEqual((resp.status, data), (200, b"hello text"))
            proc.kill()
            proc.wait(timeout=EXIT_DEADLINE_S)
            # Killed, it left the socket with its starter: nobody else can bind the port.
            squatter = socket.socket()
            self.addCleanup(squatter.close)
            with self.assertRaises(OSError):
                squatter.bind(("127.0.0.1", port))

    def test_a_descriptor_that_is_not_a_socket_exits_4(self):
        r, w = os.pipe()
        self.addCleanup(os.close, r)
        self.addCleanup(os.close, w)
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLESS_")}
        env.update(
            SLESS_LISTEN_FD=str(r),
            SLESS_CODE_DIR=os.path.join(self.tmp, "code"),
            SLESS_ENTRYPOINT="funcs.text",
        )
        proc = subprocess.run(
            [sys.executable, WRAPPER], env=env, pass_fds=(r,), capture_output=True,
            timeout=EXIT_DEADLINE_S,
        )
        self.assertEqual(proc.returncode, 4, proc.stderr)
        self.assertIn(b"SLESS_LISTEN_FD", proc.stderr)


class LifecycleTest(RuntimeTestCase):
    def test_sigterm_exits_0(self):
        rt = self.start("funcs.text")
        resp, _ = rt.request("GET", "/")
        self.assertEqual(resp.status, 200)
        rt.proc.send_signal(signal.SIGTERM)
        self.assertEqual(rt.wait_exit(), 0)

    def test_access_log_line(self):
        rt = self.start("funcs.text")
        rt.request("POST", "/logged?secret=1", body=b"x")
        rt.proc.send_signal(signal.SIGTERM)
        rt.wait_exit()
        lines = rt.stderr_text().splitlines()
        matching = [l for l in lines if l.startswith("POST /logged ")]
        self.assertEqual(len(matching), 1, lines)
        method, path, status, duration = matching[0].split(" ")
        self.assertEqual(status, "200")
        self.assertTrue(duration.endswith("ms"))
        float(duration[:-2])


if __name__ == "__main__":
    unittest.main()
