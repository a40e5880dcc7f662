"""Tests of the SDK's E2B-shaped surface: ``Sandbox.create(template, *,
timeout, envs, metadata, api_key, base_url ...)``, ``sandbox_id``,
``kill``, the context manager, ``set_timeout``, ``is_running``,
``get_info``, ``connect``, ``commands.run`` raising
``CommandExitException``, ``files.read`` as text, and E2B's error names.

Unit tests answer from a local http.server with canned responses; the live
tests (the E2B quickstart) run against STEAD_ENDPOINT / STEAD_API_KEY and
are skipped without STEAD_ENDPOINT (TestPythonSDK fails on any skip).
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import threading
import time
import unittest
import uuid
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from unittest import mock

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import stead  # noqa: E402
from stead import CommandExitException, Sandbox  # noqa: E402
from stead import client as stead_client  # noqa: E402

LIVE = bool(os.environ.get("STEAD_ENDPOINT"))

SB = {"id": "sb-1", "name": "one", "state": "running", "template": "host", "idle_timeout": "15m0s",
      "on_idle": "stop", "labels": {"team": "research"}, "limits": {"cpus": 1, "memory_bytes": 1 << 30},
      "started_at": "2026-12-01T10:00:00.123456789Z", "created_at": "2026-12-01T09:59:59Z"}


def _json(status, body):
    return (status, "application/json", json.dumps(body))


def _problem(status, detail):
    return (status, "application/problem+json", json.dumps({"title": "t", "status": status, "detail": detail}))


def _exec(exit_code=0, stdout=b"", stderr=b"", timed_out=False, signal=""):
    d = {"exit_code": exit_code, "stdout": stdout.decode("utf-8", "replace"),
         "stderr": stderr.decode("utf-8", "replace")}
    if timed_out:
        d["timed_out"] = True
    if signal:
        d["signal"] = signal
    return _json(200, d)


class _Handler(BaseHTTPRequestHandler):
    """Answers from the server's routes: (method, path) -> a canned answer
    or a list of them (taken in turn, the last one repeating)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _serve(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        self.server.requests.append((self.command, self.path, dict(self.headers), body))
        key = (self.command, self.path.split("?", 1)[0])
        route = self.server.routes.get(key)
        if isinstance(route, list):
            route = route.pop(0) if len(route) > 1 else route[0]
        if route is None:
            route = _problem(404, "no route " + self.path)
        status, ctype, payload = route
        data = payload.encode() if isinstance(payload, str) else payload
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = _serve


class _Server(ThreadingHTTPServer):
    daemon_threads = True


class E2BShapeTest(unittest.TestCase):
    """The E2B-shaped calls send what they say and raise what E2B raises."""

    def setUp(self):
        srv = _Server(("127.0.0.1", 0), _Handler)
        srv.routes, srv.requests = {}, []
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.addCleanup(srv.server_close)
        self.addCleanup(srv.shutdown)
        self.srv = srv
        self.url = "http://127.0.0.1:%d" % srv.server_address[1]
        self.client = stead.Client(self.url, "sk-test")
        # Keep the environment of the live tests out of the unit tests.
        env = {k: v for k, v in os.environ.items() if not k.startswith("STEAD_")}
        p = mock.patch.dict(os.environ, env, clear=True)
        p.start()
        self.addCleanup(p.stop)
        p = mock.patch.object(stead_client, "DEFAULT_SOCKET", "/nonexistent/stead.sock")
        p.start()
        self.addCleanup(p.stop)

    def route(self, method, path, answer):
        self.srv.routes[(method, path)] = answer

    def last(self):
        return self.srv.requests[-1]

    def test_create_takes_template_first_and_e2b_keywords(self):
        self.route("POST", "/v1/sandboxes", _json(201, SB))
        sbx = Sandbox.create("python", timeout=600, envs={"A": "1"}, metadata={"team": "research"},
                             api_key="sk-kw", base_url=self.url, allow_internet_access=False)
        self.assertEqual((sbx.sandbox_id, sbx.id, sbx.keep), ("sb-1", "sb-1", False))
        _, path, headers, body = self.last()
        self.assertEqual(headers["Authorization"], "Bearer sk-kw")
        self.assertEqual(json.loads(body), {
            "template": "python", "idle_timeout": "600s", "env": {"A": "1"}, "labels": {"team": "research"},
            "network": {"internet": False, "allow": [], "deny": []},
        })
        # The client from the environment: STEAD_URL and STEAD_API_KEY.
        os.environ["STEAD_URL"] = self.url
        os.environ["STEAD_API_KEY"] = "sk-env"
        sbx = Sandbox.create(name="n", keep=True)
        self.assertTrue(sbx.keep)
        _, _, headers, body = self.last()
        self.assertEqual((headers["Authorization"], json.loads(body)), ("Bearer sk-env", {"name": "n"}))
        # stead's own names still work, client= too.
        Sandbox.create(client=self.client, env={"B": "2"}, idle_timeout="1h", labels={"x": "y"})
        self.assertEqual(json.loads(self.last()[3]), {"env": {"B": "2"}, "idle_timeout": "1h", "labels": {"x": "y"}})

    def test_create_refuses_two_names_of_one_setting_before_any_request(self):
        for kw in ({"envs": {"A": "1"}, "env": {"A": "2"}}, {"timeout": 5, "idle_timeout": 6},
                   {"metadata": {"a": "b"}, "labels": {"a": "c"}},
                   {"allow_internet_access": True, "network": {"internet": False}},
                   {"api_key": "k"}):
            with self.assertRaises(stead.InvalidArgumentException, msg=repr(kw)):
                Sandbox.create(client=self.client, **kw)
        with self.assertRaises(TypeError):
            Sandbox.create(None, "name-as-second-positional")  # keywords only after the template
        self.assertEqual(self.srv.requests, [])

    def test_positional_client_still_works_with_a_warning(self):
        self.route("POST", "/v1/sandboxes", _json(201, SB))
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            sbx = Sandbox.create(self.client, name="one")
        self.assertEqual(sbx.id, "sb-1")
        self.assertEqual([x.category for x in w], [DeprecationWarning])
        self.assertEqual(json.loads(self.last()[3]), {"name": "one"})

    def test_non_zero_exit_raises_command_exit_exception(self):
        self.route("GET", "/v1/sandboxes/sb-1", _json(200, SB))
        self.route("POST", "/v1/sandboxes/sb-1/exec", [
            _exec(3, b"out\n", b"boom\n"), _exec(3, b"out\n"), _exec(0, b"fine\n"),
            _exec(-1, timed_out=True, signal="SIGKILL"), _exec(-1, signal="SIGKILL"), _exec(0),
        ])
        sbx = Sandbox.get("sb-1", client=self.client)
        with self.assertRaises(CommandExitException) as cm:
            sbx.commands.run("exit 3", envs={"X": "1"}, cwd="/tmp", user="user", timeout=5)
        e = cm.exception
        self.assertEqual((e.exit_code, e.stdout, e.stderr, e.error), (3, "out\n", "boom\n", "exit status 3"))
        self.assertEqual(e.result.exit_code, 3)
        self.assertIsInstance(e, stead.SandboxException)
        self.assertIn("boom", str(e))
        self.assertEqual(json.loads(self.last()[3]), {
            "command": ["/bin/sh", "-c", "exit 3"], "env": {"X": "1"}, "cwd": "/tmp", "user": "agent",
            "timeout": "5s"})
        r = sbx.commands.run("exit 3", check=False)
        self.assertEqual((r.exit_code, r.stdout, r.ok, r.error), (3, "out\n", False, "exit status 3"))
        r = sbx.commands.run("echo fine")
        self.assertEqual((r.exit_code, r.stdout, r.stderr, r.error), (0, "fine\n", "", ""))
        with self.assertRaises(stead.TimeoutException) as cm:
            sbx.commands.run("sleep 9", timeout=1)
        self.assertTrue(cm.exception.result.timed_out)
        with self.assertRaises(CommandExitException) as cm:
            sbx.commands.run("kill -9 $$")
        self.assertEqual(cm.exception.error, "killed by SIGKILL")
        with self.assertRaises(stead.InvalidError):
            sbx.commands.run("x", envs={"A": "1"}, env={"A": "2"})

    def test_files_read_text_bytes_stream(self):
        self.route("GET", "/v1/sandboxes/sb-1", _json(200, SB))
        self.route("GET", "/v1/sandboxes/sb-1/files/content",
                   (200, "application/octet-stream", "héllo\n".encode()))
        sbx = Sandbox.get("sb-1", client=self.client)
        self.assertEqual(sbx.files.read("/a"), "héllo\n")
        self.assertEqual(sbx.files.read("/a", format="bytes"), "héllo\n".encode())
        self.assertEqual(b"".join(sbx.files.read("/a", format="stream")), "héllo\n".encode())
        self.assertEqual(sbx.files.read_text("/a"), "héllo\n")
        n = len(self.srv.requests)
        with self.assertRaises(stead.InvalidError):
            sbx.files.read("/a", format="json")
        self.assertEqual(len(self.srv.requests), n)

    def test_files_write_creates_missing_parents(self):
        info = {"name": "f.txt", "path": "/w/new/f.txt", "type": "file", "size": 2}
        self.route("GET", "/v1/sandboxes/sb-1", _json(200, SB))
        self.route("PUT", "/v1/sandboxes/sb-1/files/content", [_problem(404, "no such directory"), _json(200, info)])
        self.route("GET", "/v1/sandboxes/sb-1/files/stat", _problem(404, "no such file"))
        self.route("POST", "/v1/sandboxes/sb-1/files/mkdir", (204, "application/json", ""))
        sbx = Sandbox.get("sb-1", client=self.client)
        got = sbx.files.write("/w/new/f.txt", "hi")
        self.assertEqual((got.name, got.path, got.type), ("f.txt", "/w/new/f.txt", "file"))
        calls = [(m, p.split("?")[0].rsplit("/", 1)[-1]) for m, p, _, _ in self.srv.requests[1:]]
        self.assertEqual(calls, [("PUT", "content"), ("GET", "stat"), ("POST", "mkdir"), ("PUT", "content")])
        mk = [json.loads(b) for m, p, _, b in self.srv.requests if p.endswith("/mkdir")]
        self.assertEqual(mk, [{"path": "/w/new", "parents": True}])
        self.assertEqual(self.last()[3], b"hi")

    def test_kill_context_manager_and_purge_state(self):
        gone = dict(SB, state="stopped")  # the daemon answers a purge with the sandbox as it was
        self.route("POST", "/v1/sandboxes", _json(201, SB))
        self.route("DELETE", "/v1/sandboxes/sb-1", _json(200, gone))
        self.route("DELETE", "/v1/sandboxes/sb-gone", _problem(404, "no sandbox sb-gone"))
        with Sandbox.create(client=self.client) as sbx:
            self.assertEqual(sbx.state, "running")
        self.assertEqual(self.last()[:2], ("DELETE", "/v1/sandboxes/sb-1?purge=true"))
        self.assertEqual(sbx.state, "deleted")
        # keep=True: the block leaves it alone.
        n = len(self.srv.requests)
        with Sandbox.create(client=self.client, keep=True):
            pass
        self.assertEqual(len(self.srv.requests), n + 1)
        # An error in the block is not hidden by the kill's.
        self.route("DELETE", "/v1/sandboxes/sb-1", _problem(500, "kill failed"))
        with self.assertRaises(ZeroDivisionError):
            with Sandbox.create(client=self.client):
                1 / 0
        self.assertEqual(self.last()[0], "DELETE")
        with self.assertRaises(stead.SteadError):
            with Sandbox.create(client=self.client):
                pass
        # delete(purge=True) says deleted; kill on the class and on the instance.
        self.route("DELETE", "/v1/sandboxes/sb-1", _json(200, gone))
        sbx = Sandbox.create(client=self.client)
        self.assertEqual(sbx.delete(purge=True).state, "deleted")
        self.assertTrue(Sandbox.kill("sb-1", client=self.client))
        self.assertFalse(Sandbox.kill("sb-gone", api_key="k", base_url=self.url))
        self.assertEqual(self.last()[:2], ("DELETE", "/v1/sandboxes/sb-gone?purge=true"))
        sbx.raw["id"] = "sb-gone"
        self.assertFalse(sbx.kill())

    def test_is_running_get_info_and_connect(self):
        self.route("GET", "/v1/sandboxes/sb-1", [_json(200, SB), _json(200, dict(SB, state="paused")), _json(200, SB)])
        self.route("POST", "/v1/sandboxes/sb-1/start", _json(200, SB))
        sbx = Sandbox.get("sb-1", client=self.client)
        self.assertFalse(sbx.is_running())
        self.assertTrue(sbx.is_running())
        info = sbx.get_info()
        self.assertEqual((info.sandbox_id, info.name, info.template_id, info.state, info.metadata),
                         ("sb-1", "one", "host", "running", {"team": "research"}))
        self.assertEqual((info.idle_timeout, info.cpu_count, info.memory_mb, info.end_at), (900.0, 1, 1024, None))
        self.assertEqual(info.started_at, datetime.datetime(2026, 12, 1, 10, 0, 0, 123456,
                                                            tzinfo=datetime.timezone.utc))
        self.assertEqual(Sandbox.get_info("sb-1", client=self.client).sandbox_id, "sb-1")
        # max_runtime gives the end.
        self.route("GET", "/v1/sandboxes/sb-1", _json(200, dict(SB, max_runtime="1h0m0s")))
        self.assertEqual(sbx.get_info().end_at, info.started_at + datetime.timedelta(hours=1))
        # connect starts a sandbox that is not running; it is kept by default.
        self.route("GET", "/v1/sandboxes/sb-1", _json(200, dict(SB, state="stopped")))
        c = Sandbox.connect("sb-1", client=self.client)
        self.assertEqual((c.state, c.keep), ("running", True))
        self.assertEqual(self.last()[:2], ("POST", "/v1/sandboxes/sb-1/start"))
        self.route("GET", "/v1/sandboxes/sb-404", _problem(404, "no sandbox sb-404"))
        self.assertFalse(Sandbox.get("sb-1", client=self.client)._update(dict(SB, id="sb-404")).is_running())

    def test_set_timeout(self):
        self.route("GET", "/v1/sandboxes/sb-1", _json(200, dict(SB, idle_timeout="1m0s")))
        self.route("GET", "/v1/sandboxes/sb-1/files/stat", _json(200, {"name": "/", "path": "/", "type": "dir"}))
        sbx = Sandbox.get("sb-1", client=self.client)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            self.assertIs(sbx.set_timeout(30), sbx)
            self.assertEqual(w, [])
            self.assertEqual(self.last()[:2], ("GET", "/v1/sandboxes/sb-1/files/stat?path=%2F"))
            sbx.set_timeout("2h")  # longer than the idle timeout: a warning
            self.assertEqual([x.category for x in w], [RuntimeWarning])
            self.assertIn("idle_timeout", str(w[0].message))
            Sandbox.set_timeout("sb-1", 60, client=self.client)
            self.assertEqual(len(w), 1)
        n = len(self.srv.requests)
        for bad in (0, -1, "soon", True, None):
            with self.assertRaises(stead.InvalidError, msg=repr(bad)):
                sbx.set_timeout(bad)
        self.assertEqual(len(self.srv.requests), n)
        self.route("GET", "/v1/sandboxes/sb-1", _json(200, dict(SB, state="stopped")))
        with self.assertRaises(stead.ConflictError):
            sbx.set_timeout(30)
        self.assertNotIn("stat", self.last()[1])

    def test_error_names(self):
        for status, cls in ((402, stead.BudgetError), (429, stead.RateLimitException), (504, stead.TimeoutException),
                            (401, stead.AuthenticationException), (404, stead.NotFoundException),
                            (422, stead.InvalidArgumentException), (507, stead.NotEnoughSpaceException)):
            self.route("GET", "/v1/sandboxes/s%d" % status, _problem(status, "d%d" % status))
            with self.assertRaises(cls) as cm:
                Sandbox.get("s%d" % status, client=self.client)
            self.assertEqual((cm.exception.status, str(cm.exception)), (status, "d%d" % status))
            self.assertIsInstance(cm.exception, stead.SandboxException)
        self.assertIs(stead.SandboxException, stead.SteadError)
        self.assertFalse(hasattr(stead, "StealError"))

    def test_checkpoint_body(self):
        self.route("GET", "/v1/sandboxes/sb-1", _json(200, SB))
        self.route("PUT", "/v1/sandboxes/sb-1/checkpoints/p", _json(200, {"name": "p", "version": 1}))
        self.route("GET", "/v1/sandboxes/sb-1/checkpoints/p", _json(200, {"name": "p", "version": 1, "body": [1]}))
        sbx = Sandbox.get("sb-1", client=self.client)
        sbx.checkpoints.put("p", body={"step": 1})
        self.assertEqual(json.loads(self.last()[3]), {"step": 1})
        sbx.state.put("p", doc=None)  # the older keyword; null is a document
        self.assertEqual(self.last()[3], b"null")
        self.assertEqual(sbx.checkpoints.get("p").body, [1])
        with self.assertRaises(TypeError):
            sbx.checkpoints.put("p")


def _unique(prefix):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:8])


@unittest.skipUnless(LIVE, "set STEAD_ENDPOINT and STEAD_API_KEY to run the live tests")
class E2BQuickstartTest(unittest.TestCase):
    """E2B's quickstart, as ported code runs it, against a live daemon. The
    client comes from the environment (no client= anywhere)."""

    def test_quickstart(self):
        with Sandbox.create(metadata={"suite": "e2b"}) as sbx:
            sid = sbx.sandbox_id
            self.assertTrue(sid.startswith("sb-"))
            self.assertTrue(sbx.is_running())

            r = sbx.commands.run('echo "hello $WHO"', envs={"WHO": "e2b"})
            self.assertEqual((r.stdout, r.stderr, r.exit_code), ("hello e2b\n", "", 0))
            self.assertEqual(sbx.commands.run("pwd", cwd="/tmp").stdout, "/tmp\n")
            self.assertEqual(sbx.commands.run("id -un", user="root").stdout, "root\n")
            with self.assertRaises(CommandExitException) as cm:
                sbx.commands.run("echo partial; echo bad >&2; exit 7")
            self.assertEqual((cm.exception.exit_code, cm.exception.stdout, cm.exception.stderr),
                             (7, "partial\n", "bad\n"))
            with self.assertRaises(stead.TimeoutException):
                sbx.commands.run("sleep 30", timeout=1)
            bg = sbx.commands.run("sleep 1; echo done", background=True)
            self.assertGreater(bg.pid, 0)

            # files: text by default, parents made, list/exists/remove
            sbx.files.write("/home/agent/project/src/main.py", "print('hi')\n")
            self.assertEqual(sbx.files.read("/home/agent/project/src/main.py"), "print('hi')\n")
            sbx.files.write("/home/agent/project/data.bin", bytes(range(256)))
            self.assertEqual(sbx.files.read("/home/agent/project/data.bin", format="bytes"), bytes(range(256)))
            self.assertEqual(sorted(e.name for e in sbx.files.list("/home/agent/project")), ["data.bin", "src"])
            self.assertEqual(sorted(e.path for e in sbx.files.list("/home/agent/project", depth=2)),
                             ["/home/agent/project/data.bin", "/home/agent/project/src",
                              "/home/agent/project/src/main.py"])
            self.assertTrue(sbx.files.exists("/home/agent/project/data.bin"))
            sbx.files.remove("/home/agent/project/data.bin")
            self.assertFalse(sbx.files.exists("/home/agent/project/data.bin"))
            self.assertTrue(sbx.files.make_dir("/home/agent/project/a/b"))
            self.assertFalse(sbx.files.make_dir("/home/agent/project/a/b"))
            with self.assertRaises(stead.NotFoundException):
                sbx.files.read("/home/agent/project/nope")

            info = sbx.get_info()
            self.assertEqual((info.sandbox_id, info.state, info.metadata), (sid, "running", {"suite": "e2b"}))
            self.assertIsNotNone(info.started_at)

            # pause, then connect resumes it with its files
            sbx.pause()
            self.assertFalse(sbx.is_running())
            self.assertEqual(sbx.get_info().state, "paused")
            again = Sandbox.connect(sid)
            self.assertTrue(again.is_running())
            self.assertEqual(again.files.read("/home/agent/project/src/main.py"), "print('hi')\n")
            self.assertEqual(again.commands.run("echo back").stdout, "back\n")
            again.set_timeout(60)
            # stead's persistence verbs beside E2B's
            cp = sbx.checkpoints.put("progress", body={"step": 1})
            self.assertEqual(sbx.checkpoints.get("progress").body, {"step": 1})
            self.assertEqual(cp.version, 1)
            snap = sbx.snapshot(label="e2b")
            sbx.files.write("/home/agent/project/src/main.py", "changed\n")
            sbx.rollback(snap)
            self.assertEqual(sbx.files.read("/home/agent/project/src/main.py"), "print('hi')\n")
            self.assertIn("progress", sbx.orient().text)
        # The with block killed it: gone for good.
        self.assertEqual(sbx.state, "deleted")
        with self.assertRaises(stead.NotFoundException):
            Sandbox.connect(sid)
        self.assertFalse(Sandbox.kill(sid))
        self.assertNotIn(sid, [s.id for s in Sandbox.list(all=True)])

    def test_keep_and_kill(self):
        name = _unique("e2b-keep")
        with Sandbox.create(name=name, keep=True) as sbx:
            sbx.files.write("/home/agent/note", "kept")
        self.assertTrue(Sandbox.connect(name).is_running())
        with Sandbox.connect(name) as again:  # connect keeps by default
            self.assertEqual(again.files.read("/home/agent/note"), "kept")
        self.assertTrue(again.is_running())
        self.assertTrue(Sandbox.kill(sbx.sandbox_id))
        self.assertFalse(sbx.is_running())
        with self.assertRaises(stead.NotFoundException):
            Sandbox.get(name)
        # delete(purge=True) says what happened.
        other = Sandbox.create(no_start=True)
        self.assertEqual(other.delete(purge=True).state, "deleted")
        with self.assertRaises(stead.NotFoundException):
            other.refresh()

    def test_timeout_is_the_idle_auto_stop_and_set_timeout_keeps_it_up(self):
        # timeout=5: stopped after 5 s without activity (the daemon of
        # TestPythonSDK checks every second). set_timeout counts as
        # activity: called every second, it keeps the sandbox up more than
        # twice its idle timeout; left alone, the sandbox stops (files
        # kept) and connect starts it again.
        sbx = Sandbox.create(timeout=5)
        self.addCleanup(sbx.kill)
        self.assertEqual(sbx.get_info().idle_timeout, 5.0)
        sbx.files.write("/home/agent/kept", "yes")
        deadline = time.monotonic() + 12
        while time.monotonic() < deadline:
            sbx.set_timeout(5)
            time.sleep(1)
        self.assertTrue(sbx.is_running(), "set_timeout did not keep the sandbox up")
        deadline = time.monotonic() + 60
        while sbx.is_running() and time.monotonic() < deadline:
            time.sleep(0.5)
        info = sbx.get_info()
        self.assertEqual((info.state, info.stop_reason), ("stopped", "idle"))
        with self.assertRaises(stead.ConflictError):
            sbx.set_timeout(5)
        self.assertEqual(Sandbox.connect(sbx.sandbox_id).files.read("/home/agent/kept"), "yes")


if __name__ == "__main__":
    unittest.main()
