"""Tests of the stead Python SDK (standard library unittest).

Unit tests need no daemon: endpoint and key resolution, and the wire
handling (errors, SSE streaming, unix sockets) against canned responses
from a local http.server.

Live tests run against the daemon given by STEAD_ENDPOINT and STEAD_API_KEY
and are skipped without STEAD_ENDPOINT (the Go e2e test
TestPythonSDK sets both and fails on any skip).

    STEAD_ENDPOINT=http://127.0.0.1:7878 STEAD_API_KEY=... \\
    PYTHONPATH=sdk/python python3 -m unittest discover -s sdk/python/tests -v
"""

from __future__ import annotations

import json
import os
import socketserver
import sys
import tempfile
import threading
import time
import unittest
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from unittest import mock

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import stead  # noqa: E402
from stead import client as stead_client  # noqa: E402

LIVE = bool(os.environ.get("STEAD_ENDPOINT"))


# ---------------------------------------------------------------------------
# Unit tests: no daemon.
# ---------------------------------------------------------------------------


class EndpointResolutionTest(unittest.TestCase):
    def setUp(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith("STEAD_")}
        p = mock.patch.dict(os.environ, env, clear=True)
        p.start()
        self.addCleanup(p.stop)
        p = mock.patch.object(stead_client, "DEFAULT_SOCKET", "/nonexistent/stead.sock")
        p.start()
        self.addCleanup(p.stop)
        p = mock.patch.object(stead_client, "DEFAULT_ADMIN_KEY", "/nonexistent/admin.key")
        p.start()
        self.addCleanup(p.stop)

    def test_default_endpoint_is_local_tcp(self):
        self.assertEqual(stead.Client().endpoint, "http://127.0.0.1:7878")
        self.assertEqual(stead.Client().api_key, "")

    def test_env_endpoint_and_key(self):
        os.environ["STEAD_ENDPOINT"] = "unix:///tmp/x.sock"
        os.environ["STEAD_API_KEY"] = "sk-env"
        c = stead.Client()
        self.assertEqual(c.endpoint, "unix:///tmp/x.sock")
        self.assertEqual(c.api_key, "sk-env")

    def test_arguments_win_over_env(self):
        os.environ["STEAD_ENDPOINT"] = "http://10.0.0.1:1"
        os.environ["STEAD_API_KEY"] = "sk-env"
        c = stead.Client("http://127.0.0.2:9", "sk-arg")
        self.assertEqual((c.endpoint, c.api_key), ("http://127.0.0.2:9", "sk-arg"))

    def test_key_from_data_dir_then_default_file(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "admin.key"), "w") as f:
                f.write("sk-file\n")
            os.environ["STEAD_DATA_DIR"] = d
            self.assertEqual(stead.Client().api_key, "sk-file")
            os.environ["STEAD_API_KEY"] = "sk-env"
            self.assertEqual(stead.Client().api_key, "sk-env")
            del os.environ["STEAD_API_KEY"], os.environ["STEAD_DATA_DIR"]
            with mock.patch.object(stead_client, "DEFAULT_ADMIN_KEY", os.path.join(d, "admin.key")):
                self.assertEqual(stead.Client().api_key, "sk-file")

    def test_local_socket_when_it_exists(self):
        with tempfile.NamedTemporaryFile() as f:
            with mock.patch.object(stead_client, "DEFAULT_SOCKET", f.name):
                self.assertEqual(stead.Client().endpoint, "unix://" + f.name)

    def test_bad_endpoints(self):
        for ep in ("ftp://x", "127.0.0.1:7878", "unix://", "http://"):
            with self.assertRaises(ValueError, msg=ep):
                stead.Client(ep, "k")


class _Canned(BaseHTTPRequestHandler):
    """Answers from the ROUTES table of the server; records requests."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _serve(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        self.server.requests.append((self.command, self.path, dict(self.headers), body))
        route = self.server.routes.get((self.command, self.path.split("?", 1)[0]))
        if route is None:
            route = (404, "application/problem+json",
                     json.dumps({"title": "Not Found", "status": 404, "detail": "no route " + self.path}))
        if callable(route):
            return route(self)
        status, ctype, payload = route
        data = payload.encode() if isinstance(payload, str) else payload
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = _serve


class _TCPServer(ThreadingHTTPServer):
    daemon_threads = True


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def _problem(status, detail, errors=None):
    p = {"title": "t%d" % status, "status": status, "detail": detail}
    if errors:
        p["errors"] = errors
    return (status, "application/problem+json", json.dumps(p))


SB = {"id": "sb-1", "name": "one", "state": "running"}


class CannedServerTest(unittest.TestCase):
    """The SDK against a local http.server with canned answers."""

    def start(self, routes, unix=False):
        if unix:
            d = tempfile.mkdtemp()
            path = os.path.join(d, "s.sock")
            srv = _UnixServer(path, _Canned)
            endpoint = "unix://" + path
        else:
            srv = _TCPServer(("127.0.0.1", 0), _Canned)
            endpoint = "http://127.0.0.1:%d" % srv.server_address[1]
        srv.routes, srv.requests = routes, []
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.addCleanup(srv.server_close)
        self.addCleanup(srv.shutdown)
        self.srv = srv
        return stead.Client(endpoint, "sk-test")

    def test_status_maps_to_error_class_with_detail_as_message(self):
        cases = {
            400: stead.InvalidError, 401: stead.UnauthenticatedError, 403: stead.ForbiddenError,
            404: stead.NotFoundError, 409: stead.ConflictError, 413: stead.InvalidError,
            422: stead.InvalidError, 507: stead.QuotaError, 500: stead.SteadError,
        }
        routes = {("GET", "/v1/sandboxes/s%d" % st): _problem(st, "detail %d" % st) for st in cases}
        c = self.start(routes)
        for st, cls in cases.items():
            with self.assertRaises(cls) as cm:
                stead.Sandbox.get("s%d" % st, client=c)
            e = cm.exception
            self.assertIsInstance(e, stead.SteadError)
            self.assertIsInstance(e, stead.SandboxException)
            self.assertEqual(e.status, st)
            self.assertEqual(str(e), "detail %d" % st)
            self.assertEqual(e.detail, "detail %d" % st)
        self.assertIs(stead.NotFound, stead.NotFoundError)
        self.assertFalse(hasattr(stead, "StealError"))  # the typo'd alias is gone

    def test_validation_errors_and_non_json_bodies(self):
        c = self.start({
            ("POST", "/v1/sandboxes"): _problem(422, "validation failed",
                                                [{"message": "expected string", "location": "body.name"}]),
            ("GET", "/v1/sandboxes/x"): (502, "text/plain", "bad gateway\n"),
        })
        with self.assertRaises(stead.Invalid) as cm:
            stead.Sandbox.create(client=c, name="x")
        self.assertEqual(cm.exception.errors, ["body.name: expected string"])
        self.assertIn("validation failed", str(cm.exception))
        with self.assertRaises(stead.SteadError) as cm:
            stead.Sandbox.get("x", client=c)
        self.assertEqual((cm.exception.status, str(cm.exception)), (502, "bad gateway"))

    def test_requests_carry_key_and_json(self):
        c = self.start({("POST", "/v1/sandboxes"): (201, "application/json", json.dumps(SB))})
        sb = stead.Sandbox.create(client=c, name="one", env={"A": "1"}, idle_timeout=90,
                                  volumes=["data/agents/a1:/data:ro"], service="sleep 1000")
        self.assertEqual((sb.id, sb.name, sb.state), ("sb-1", "one", "running"))
        method, path, headers, body = self.srv.requests[-1]
        self.assertEqual(headers["Authorization"], "Bearer sk-test")
        self.assertEqual(headers["Content-Type"], "application/json")
        self.assertEqual(json.loads(body), {
            "name": "one", "env": {"A": "1"}, "idle_timeout": "90s",
            "volumes": [{"volume": "data", "sub_path": "agents/a1", "path": "/data", "read_only": True}],
            "service": {"command": ["/bin/sh", "-c", "sleep 1000"]},
        })

    def test_usage_sends_the_query(self):
        report = {"tenant": "default", "total": {"running_seconds": 155, "cost": 0.0014},
                  "rows": [], "always_on": {"cost": 0.07, "actual_cost": 0.0014, "saving_percent": 98.1}}
        c = self.start({("GET", "/v1/usage"): (200, "application/json", json.dumps(report))})
        import datetime
        r = c.usage(by="day", since=datetime.date(2026, 11, 1),
                    until=datetime.datetime(2026, 12, 1, 12, 0), sandbox="one")
        self.assertEqual(r["always_on"]["saving_percent"], 98.1)
        method, path, _, _ = self.srv.requests[-1]
        self.assertEqual(method, "GET")
        self.assertEqual(path, "/v1/usage?by=day&since=2026-11-01&until=2026-12-01T12%3A00%3A00Z&sandbox=one")

    def test_tenants_and_keys_send_what_they_say(self):
        key = {"id": "key-1", "name": "bot", "role": "read-only", "labels": {"team": "research"}}
        c = self.start({
            ("POST", "/v1/tenants"): (201, "application/json", json.dumps({"id": "acme", "state": "active"})),
            ("POST", "/v1/tenants/acme/suspend"): (200, "application/json", json.dumps({"id": "acme", "state": "suspended"})),
            ("DELETE", "/v1/tenants/acme"): (200, "application/json", json.dumps({"tenant": "acme", "erased_scopes": ["t-acme"]})),
            ("POST", "/v1/keys"): (201, "application/json", json.dumps(dict(key, secret="stead_x"))),
            ("GET", "/v1/keys"): (200, "application/json", json.dumps({"items": [key], "more": False})),
            ("POST", "/v1/keys/key-1/rotate"): (201, "application/json", json.dumps(dict(key, id="key-2", secret="stead_y"))),
            ("DELETE", "/v1/keys/key-1"): (204, "application/json", ""),
            ("POST", "/v1/sandboxes"): (201, "application/json", json.dumps(dict(SB, labels={"team": "research"}))),
        })
        t = stead.Tenant.create("acme", client=c)
        self.assertEqual(t.suspend().state, "suspended")
        self.assertEqual(t.delete()["erased_scopes"], ["t-acme"])
        k = stead.APIKey.create("bot", role="read-only", labels={"team": "research"}, expires_in="24h",
                                client=c.with_tenant("acme"))
        self.assertEqual((k.secret, k.role, k.labels), ("stead_x", "read-only", {"team": "research"}))
        method, path, headers, body = self.srv.requests[-1]
        self.assertEqual(headers.get("X-Stead-Tenant"), "acme")
        self.assertEqual(json.loads(body), {"name": "bot", "role": "read-only", "labels": {"team": "research"}, "expires_in": "24h"})
        self.assertEqual([x.id for x in stead.APIKey.list(client=c)], ["key-1"])
        self.assertNotIn("X-Stead-Tenant", self.srv.requests[-1][2])
        n = stead.APIKey.list(client=c)[0].rotate(overlap="1h")
        self.assertEqual((n.id, n.secret), ("key-2", "stead_y"))
        self.assertEqual(json.loads(self.srv.requests[-1][3]), {"overlap": "1h"})
        stead.APIKey.list(client=c)[0].revoke()
        self.assertEqual(self.srv.requests[-1][:2], ("DELETE", "/v1/keys/key-1"))
        sb = stead.Sandbox.create(client=c, name="w", labels={"team": "research"})
        self.assertEqual(sb.labels, {"team": "research"})
        self.assertEqual(json.loads(self.srv.requests[-1][3])["labels"], {"team": "research"})

    def test_unix_socket_endpoint(self):
        c = self.start({("GET", "/v1/sandboxes/sb-1"): (200, "application/json", json.dumps(SB))}, unix=True)
        self.assertEqual(stead.Sandbox.get("sb-1", client=c).id, "sb-1")

    def test_unreachable(self):
        c = stead.Client("unix:///nonexistent/stead.sock", "k")
        with self.assertRaises(stead.UnreachableError):
            c.info()

    def test_streaming_callbacks_get_output_before_exit(self):
        def exec_sse(h):
            h.send_response(200)
            h.send_header("Content-Type", "text/event-stream")
            h.send_header("Transfer-Encoding", "chunked")
            h.end_headers()

            def chunk(s):
                b = s.encode()
                h.wfile.write(b"%x\r\n%s\r\n" % (len(b), b))
                h.wfile.flush()

            import base64
            chunk(": keep-alive\n\n")
            # "é" split across two events (text with the exact bytes in
            # data_base64, as the daemon sends bytes that are not UTF-8)
            # must come out whole.
            chunk('event: stdout\ndata: {"type":"stdout","data":"first \ufffd","data_base64":"%s"}\n\n'
                  % base64.b64encode(b"first \xc3").decode())
            chunk('event: stdout\ndata: {"type":"stdout","data":"\ufffd\\n","data_base64":"%s"}\n\n'
                  % base64.b64encode(b"\xa9\n").decode())
            chunk('event: stderr\ndata: {"type":"stderr","data":"warn\\n"}\n\n')
            time.sleep(1.0)
            chunk('event: exit\ndata: {"type":"exit","exit_code":7,"pid":42}\n\n')
            h.wfile.write(b"0\r\n\r\n")

        c = self.start({("GET", "/v1/sandboxes/sb-1"): (200, "application/json", json.dumps(SB)),
                        ("POST", "/v1/sandboxes/sb-1/exec"): exec_sse})
        sb = stead.Sandbox.get("sb-1", client=c)
        seen = []
        t0 = time.monotonic()
        res = sb.commands.run("x", on_stdout=lambda s: seen.append(("out", s, time.monotonic())),
                              on_stderr=lambda s: seen.append(("err", s, time.monotonic())), check=False)
        done = time.monotonic()
        self.assertEqual([(k, s) for k, s, _ in seen], [("out", "first "), ("out", "é\n"), ("err", "warn\n")])
        self.assertLess(seen[0][2] - t0, done - t0 - 0.5, "stdout arrived only with the exit")
        self.assertEqual((res.exit_code, res.pid, res.stdout, res.stderr), (7, 42, "first é\n", "warn\n"))
        _, _, headers, body = self.srv.requests[-1]
        self.assertIn("text/event-stream", headers["Accept"])
        self.assertEqual(json.loads(body)["command"], ["/bin/sh", "-c", "x"])

    def test_stream_error_event_and_cut_stream(self):
        def sse(events):
            def h_(h):
                data = "".join("event: %s\ndata: %s\n\n" % e for e in events).encode()
                h.send_response(200)
                h.send_header("Content-Type", "text/event-stream")
                h.send_header("Content-Length", str(len(data)))
                h.end_headers()
                h.wfile.write(data)
            return h_

        c = self.start({("GET", "/v1/sandboxes/sb-1"): (200, "application/json", json.dumps(SB)),
                        ("POST", "/v1/sandboxes/sb-1/exec"): sse([("error", '{"type":"error","error":"boom"}')]),
                        ("POST", "/v1/sandboxes/sb-2/exec"): sse([("stdout", '{"type":"stdout","data":"eA=="}')])})
        sb = stead.Sandbox.get("sb-1", client=c)
        with self.assertRaises(stead.ExecError) as cm:
            sb.commands.run(["x"], on_stdout=print)
        self.assertEqual(str(cm.exception), "boom")
        sb.raw["id"] = "sb-2"
        with self.assertRaises(stead.ExecError):
            sb.commands.run(["x"], on_stdout=lambda s: None)

    def test_checkpoint_put_sends_if_match(self):
        cp = {"name": "p", "version": 4, "principal": "k1"}
        c = self.start({("GET", "/v1/sandboxes/sb-1"): (200, "application/json", json.dumps(SB)),
                        ("PUT", "/v1/sandboxes/sb-1/checkpoints/p"): (200, "application/json", json.dumps(cp))})
        sb = stead.Sandbox.get("sb-1", client=c)
        got = sb.state.put("p", {"a": [1, 2]}, if_version=3, agent="planner", run="r1")
        self.assertEqual(got.version, 4)
        _, path, headers, body = self.srv.requests[-1]
        self.assertEqual(headers["If-Match"], '"3"')
        self.assertIn("agent=planner", path)
        self.assertIn("run=r1", path)
        self.assertEqual(json.loads(body), {"a": [1, 2]})
        self.assertEqual(sb.state, "running")

    def test_session_wire_format(self):
        base = "/v1/sandboxes/sb-1/threads"
        ev = {"run": "run-1", "seq": 3, "time": "2026-01-01T00:00:00Z", "type": "tool_intent",
              "idempotency_key": "k", "payload": {"tool": "x"}}
        resume = {"run": {"id": "run-1", "thread": "th-1", "status": "running", "last_seq": 3},
                  "safe_point": ev, "in_doubt": [ev], "model_sessions": [{"id": "m1", "first_seq": 1}]}
        c = self.start({
            ("GET", "/v1/sandboxes/sb-1"): (200, "application/json", json.dumps(SB)),
            ("POST", base): (201, "application/json", json.dumps({"id": "th-1", "name": "main"})),
            ("POST", base + "/main/runs"): (201, "application/json", json.dumps({"id": "run-1", "status": "running"})),
            ("POST", base + "/runs/run-1/events"): (200, "application/json", json.dumps({"events": [ev]})),
            ("GET", base + "/runs/run-1/events"): (200, "application/json",
                                                   json.dumps({"items": [ev], "next": 3, "more": False,
                                                               "run_status": "running"})),
            ("GET", base + "/runs/run-1/resume"): (200, "application/json", json.dumps(resume)),
            ("POST", base + "/runs/run-1/end"): (200, "application/json",
                                                 json.dumps({"id": "run-1", "status": "failed"})),
        })
        sb = stead.Sandbox.get("sb-1", client=c)
        th = sb.session.create_thread("main", retention={"keep_last": 5})
        self.assertEqual(json.loads(self.srv.requests[-1][3]), {"name": "main", "retention": {"keep_last": 5}})
        run = sb.session.start_run(th.name)
        self.assertEqual(run.id, "run-1")
        got = sb.session.append(run, "tool_intent", {"tool": "x"}, idempotency_key="k", model_session="m1")
        self.assertEqual((got.seq, got.payload), (3, {"tool": "x"}))
        self.assertEqual(json.loads(self.srv.requests[-1][3]),
                         {"type": "tool_intent", "payload": {"tool": "x"}, "idempotency_key": "k",
                          "model_session": "m1"})
        sb.session.append_many(run, [("note", "a"), {"type": "tool_result", "payload": 1, "intent": 3}])
        self.assertEqual(json.loads(self.srv.requests[-1][3]),
                         {"events": [{"type": "note", "payload": "a"},
                                     {"type": "tool_result", "payload": 1, "intent": 3}]})
        page = sb.session.events("run-1", after=2, limit=10)
        self.assertEqual(([e.seq for e in page], page.next, page.more), ([3], 3, False))
        self.assertIn("after=2", self.srv.requests[-1][1])
        self.assertIn("limit=10", self.srv.requests[-1][1])
        r = sb.session.resume(run)
        self.assertEqual((r.run.id, r.safe_point.seq, [e.seq for e in r.in_doubt]), ("run-1", 3, [3]))
        self.assertEqual(r.model_sessions[0].id, "m1")
        self.assertEqual(sb.session.end(run, "failed").status, "failed")
        self.assertEqual(json.loads(self.srv.requests[-1][3]), {"status": "failed"})

    def test_follow_parses_sse_until_end(self):
        def sse(h):
            data = (": keep-alive\n\n"
                    'id: 1\ndata: {"run":"run-1","seq":1,"type":"note","payload":"a"}\n\n'
                    'id: 2\ndata: {"run":"run-1","seq":2,"type":"note","payload":"b"}\n\n'
                    'event: end\ndata: {"run":"run-1","status":"completed","last_seq":2}\n\n').encode()
            h.send_response(200)
            h.send_header("Content-Type", "text/event-stream")
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)

        def cut(h):
            data = b'data: {"run":"run-2","seq":1,"type":"note"}\n\n'
            h.send_response(200)
            h.send_header("Content-Type", "text/event-stream")
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)

        c = self.start({("GET", "/v1/sandboxes/sb-1"): (200, "application/json", json.dumps(SB)),
                        ("GET", "/v1/sandboxes/sb-1/threads/runs/run-1/events"): sse,
                        ("GET", "/v1/sandboxes/sb-1/threads/runs/run-2/events"): cut})
        sb = stead.Sandbox.get("sb-1", client=c)
        self.assertEqual([(e.seq, e.payload) for e in sb.session.follow("run-1", after=0)], [(1, "a"), (2, "b")])
        _, path, headers, _ = self.srv.requests[-1]
        self.assertIn("follow=true", path)
        self.assertIn("text/event-stream", headers["Accept"])
        with self.assertRaises(stead.SteadError):
            list(sb.session.follow("run-2"))

    def test_orient_tasks_and_kv_wire_format(self):
        orient = {"sandbox": SB, "stop_reason": "idle", "text": "IN DOUBT ...",
                  "checkpoints": [{"name": "p", "version": 2}], "open_tasks": [{"id": "t1", "state": "open"}],
                  "files": [{"path": "/workspace/plan.md", "tail": "x", "truncated": True}],
                  "run": {"run": {"id": "run-1"}, "in_doubt": [{"run": "run-1", "seq": 1, "type": "tool_intent"}]}}
        kv = {"key": "a/b", "value": {"n": 1}, "version": 2}
        c = self.start({
            ("GET", "/v1/sandboxes/sb-1"): (200, "application/json", json.dumps(SB)),
            ("GET", "/v1/sandboxes/sb-1/orient"): (200, "application/json", json.dumps(orient)),
            ("GET", "/v1/sandboxes/sb-1/tasks"): (200, "application/json",
                                                  json.dumps({"items": [{"id": "t1", "state": "open"}], "more": False})),
            ("POST", "/v1/sandboxes/sb-1/tasks/t1/state"): (200, "application/json",
                                                            json.dumps({"id": "t1", "state": "in_progress"})),
            ("PUT", "/v1/sandboxes/sb-1/kv/a%2Fb"): (200, "application/json", json.dumps(kv)),
            ("DELETE", "/v1/sandboxes/sb-1/kv/a%2Fb"): (204, "application/json", ""),
        })
        sb = stead.Sandbox.get("sb-1", client=c)
        o = sb.orient(files=["/workspace/plan.md", "/workspace/notes.md"], events=5)
        self.assertIn("files=%2Fworkspace%2Fplan.md%2C%2Fworkspace%2Fnotes.md", self.srv.requests[-1][1])
        self.assertIn("events=5", self.srv.requests[-1][1])
        self.assertEqual((str(o), o.stop_reason, o.sandbox.id), ("IN DOUBT ...", "idle", "sb-1"))
        self.assertEqual((o.checkpoints[0].version, o.open_tasks[0].id, o.files[0].truncated), (2, "t1", True))
        self.assertEqual([e.seq for e in o.in_doubt], [1])
        tasks = sb.tasks.list(state=["open", "in_progress"], open=True, created_after="2026-01-01T00:00:00Z")
        self.assertEqual([t.id for t in tasks], ["t1"])
        path = self.srv.requests[-1][1]
        for want in ("state=open%2Cin_progress", "open=true", "created_after=2026-01-01T00%3A00%3A00Z"):
            self.assertIn(want, path)
        sb.tasks.set_state("t1", "in_progress", if_state="open", payload={"p": 1})
        self.assertEqual(json.loads(self.srv.requests[-1][3]),
                         {"state": "in_progress", "if_state": "open", "payload": {"p": 1}})
        e = sb.kv.put("a/b", {"n": 1}, if_version=1)
        self.assertEqual((e.key, e.value, e.version), ("a/b", {"n": 1}, 2))
        _, _, headers, body = self.srv.requests[-1]
        self.assertEqual((headers["If-Match"], json.loads(body)), ('"1"', {"n": 1}))
        sb.kv.delete("a/b", if_version=0)
        self.assertEqual(self.srv.requests[-1][2]["If-Match"], '"0"')

    def test_network_and_ports_wire_format(self):
        policy = {"allow": ["*.pypi.org"], "deny": ["10.0.0.0/8"]}
        net = {"enabled": True, "address": "10.88.0.7", "gateway": "10.88.0.1", "policy": policy,
               "refused": 3, "rx_bytes": 10, "tx_bytes": 20, "bandwidth_bits": 0, "max_conns": 4096,
               "ports": [{"port": 3000, "public": True, "url": "https://3000-sb-1.x", "exposed_at": "2026-01-01T00:00:00Z"}]}

        def put_network(h):
            body = json.loads(h.server.requests[-1][3])
            out = dict(net, policy=body)
            data = json.dumps(out).encode()
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)

        c = self.start({
            ("POST", "/v1/sandboxes"): (201, "application/json",
                                        json.dumps(dict(SB, address="10.88.0.7", network=policy, auto_resume=True))),
            ("GET", "/v1/sandboxes/sb-1/network"): (200, "application/json", json.dumps(net)),
            ("PUT", "/v1/sandboxes/sb-1/network"): put_network,
            ("GET", "/v1/sandboxes/sb-1/ports"): (200, "application/json", json.dumps({"items": net["ports"], "more": False})),
            ("PUT", "/v1/sandboxes/sb-1/ports/8080"): (200, "application/json", json.dumps(
                {"port": 8080, "public": False, "path_url": "/v1/sandboxes/sb-1/ports/8080/", "token": "tok"})),
            ("DELETE", "/v1/sandboxes/sb-1/ports/8080"): (204, "application/json", ""),
            ("DELETE", "/v1/sandboxes/sb-1/ports/9"): _problem(404, "port 9 of sandbox sb-1 is not exposed"),
        })
        sb = stead.Sandbox.create(client=c, name="one", network=stead.NetworkPolicy(allow=["*.pypi.org"]),
                                  auto_resume=True)
        req = json.loads(self.srv.requests[-1][3])
        self.assertEqual((req["network"], req["auto_resume"]),
                         ({"internet": True, "allow": ["*.pypi.org"], "deny": []}, True))
        self.assertEqual((sb.address, sb.network.allow, sb.network.internet, sb.auto_resume),
                         ("10.88.0.7", ["*.pypi.org"], True, True))
        stead.Sandbox.create(client=c, name="two", network={"internet": False})
        self.assertEqual(json.loads(self.srv.requests[-1][3])["network"], {"internet": False, "allow": [], "deny": []})
        stead.Sandbox.create(client=c, name="three")
        req = json.loads(self.srv.requests[-1][3])
        self.assertNotIn("network", req)
        self.assertNotIn("auto_resume", req)
        with self.assertRaises(stead.InvalidError):
            stead.Sandbox.create(client=c, name="x", network={"alow": ["typo.example"]})

        n = sb.get_network()
        self.assertEqual((n.enabled, n.address, n.policy.deny, n.refused, n.max_conns, n.ports[0].url),
                         (True, "10.88.0.7", ["10.0.0.0/8"], 3, 4096, "https://3000-sb-1.x"))
        # set_network reads the policy, replaces the parts given, writes it back.
        n = sb.set_network(deny=["*.evil.example"], internet=False)
        self.assertEqual(json.loads(self.srv.requests[-1][3]),
                         {"internet": False, "allow": ["*.pypi.org"], "deny": ["*.evil.example"]})
        self.assertEqual((n.policy.internet, n.policy.deny), (False, ["*.evil.example"]))
        self.assertEqual(sb.network.deny, ["*.evil.example"])
        sb.set_network(allow=[])
        self.assertEqual(json.loads(self.srv.requests[-1][3])["allow"], [])
        sb.set_network(allow="api.openai.com")
        self.assertEqual(json.loads(self.srv.requests[-1][3])["allow"], ["api.openai.com"])
        with self.assertRaises(stead.InvalidError):
            sb.set_network()

        self.assertEqual([(p.port, p.public) for p in sb.list_ports()], [(3000, True)])
        ep = sb.expose_port(8080)
        self.assertEqual((ep.port, ep.public, ep.token, ep.path_url), (8080, False, "tok", "/v1/sandboxes/sb-1/ports/8080/"))
        self.assertEqual(json.loads(self.srv.requests[-1][3] or b"{}"), {})
        sb.expose_port(8080, public=True)
        self.assertEqual(json.loads(self.srv.requests[-1][3]), {"public": True})
        sb.unexpose_port(8080)
        self.assertEqual(self.srv.requests[-1][:2], ("DELETE", "/v1/sandboxes/sb-1/ports/8080"))
        with self.assertRaises(stead.NotFoundError):
            sb.unexpose_port(9)
        n_requests = len(self.srv.requests)
        for bad in (0, 65536, -1, "80", True, 80.0):
            with self.assertRaises(stead.InvalidError, msg=repr(bad)):
                sb.expose_port(bad)
        self.assertEqual(len(self.srv.requests), n_requests)


# ---------------------------------------------------------------------------
# Live tests: a real daemon.
# ---------------------------------------------------------------------------


def _unique(prefix):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:8])


@unittest.skipUnless(LIVE, "set STEAD_ENDPOINT and STEAD_API_KEY to run the live tests")
class LiveTest(unittest.TestCase):
    """The SDK against a live daemon."""

    @classmethod
    def setUpClass(cls):
        cls.client = stead.Client()
        cls.created = []

    @classmethod
    def tearDownClass(cls):
        for sb in cls.created:
            try:
                sb.delete(purge=True)
            except stead.SteadError:
                pass

    def new_sandbox(self, **kw):
        sb = stead.Sandbox.create(client=self.client, name=_unique("py"), **kw)
        self.created.append(sb)
        return sb

    def test_unknown_sandbox_is_not_found(self):
        with self.assertRaises(stead.NotFoundError) as cm:
            stead.Sandbox.connect("no-such-sandbox-" + uuid.uuid4().hex[:6], client=self.client)
        self.assertEqual(cm.exception.status, 404)
        self.assertTrue(str(cm.exception))

    def test_bad_key_is_unauthenticated(self):
        with self.assertRaises(stead.UnauthenticatedError):
            stead.Sandbox.list(client=stead.Client(self.client.endpoint, "sk-not-a-key"))

    def test_taken_name_is_conflict(self):
        sb = self.new_sandbox(no_start=True)
        with self.assertRaises(stead.ConflictError):
            stead.Sandbox.create(client=self.client, name=sb.name, no_start=True)

    def test_environment_client(self):
        # Client() resolves STEAD_ENDPOINT / STEAD_API_KEY like the CLI.
        self.assertEqual(stead.Client().info()["version"], self.client.info()["version"])

    def test_end_to_end(self):
        c = self.client
        sb = self.new_sandbox(env={"GREETING": "hi"})
        self.assertEqual(sb.state, "running")
        self.assertTrue(sb.id.startswith("sb-"))
        self.assertIn(sb.id, [s.id for s in stead.Sandbox.list(client=c)])

        # commands: exit code, output, env, stdin, args, cwd, user
        with self.assertRaises(stead.CommandExitException) as cm:
            sb.commands.run('echo "$GREETING $X"; echo oops >&2; exit 3', envs={"X": "there"})
        e = cm.exception
        self.assertEqual((e.exit_code, e.stdout, e.stderr), (3, "hi there\n", "oops\n"))
        self.assertFalse(e.result.ok)
        r = sb.commands.run('echo "$GREETING $X"; exit 3', env={"X": "there"}, check=False)
        self.assertEqual((r.exit_code, r.stdout, r.ok), (3, "hi there\n", False))
        r = sb.commands.run("cat", stdin="from stdin")
        self.assertEqual(r.stdout, "from stdin")
        r = sb.commands.run("echo", args=["a b", "c"])
        self.assertEqual(r.stdout, "a b c\n")
        r = sb.commands.run(["pwd"], cwd="/tmp")
        self.assertEqual(r.stdout.strip(), "/tmp")
        self.assertEqual(sb.commands.run("id -un", user="root").stdout.strip(), "root")
        with self.assertRaises(stead.TimeoutException) as cm:
            sb.commands.run("sleep 30", timeout=1)
        self.assertTrue(cm.exception.result.timed_out)
        self.assertTrue(sb.commands.run("sleep 30", timeout=1, check=False).timed_out)

        # streaming: the first chunk arrives before the command exits
        seen = []
        t0 = time.monotonic()
        r = sb.commands.run("echo first; sleep 2; echo second; echo err >&2; exit 5",
                            on_stdout=lambda s: seen.append(("out", s, time.monotonic())),
                            on_stderr=lambda s: seen.append(("err", s, time.monotonic())), check=False)
        done = time.monotonic()
        self.assertEqual(r.exit_code, 5)
        self.assertEqual("".join(s for k, s, _ in seen if k == "out"), "first\nsecond\n")
        self.assertEqual("".join(s for k, s, _ in seen if k == "err"), "err\n")
        self.assertEqual((r.stdout, r.stderr), ("first\nsecond\n", "err\n"))
        self.assertLess(seen[0][2], done - 1.0, "streamed output arrived only at exit")
        self.assertGreater(done - t0, 1.5)

        # background
        r = sb.commands.run("sleep 1; echo bg", background=True)
        self.assertGreater(r.pid, 0)
        self.assertTrue(r.log_path)

        # files
        sb.files.mkdir("/home/agent/work/sub", parents=True)
        info = sb.files.write("/home/agent/work/a.txt", "héllo\n")
        self.assertEqual(info.size, len("héllo\n".encode()))
        self.assertEqual(sb.files.read("/home/agent/work/a.txt"), "héllo\n")
        self.assertEqual(sb.files.read("/home/agent/work/a.txt", format="bytes"), "héllo\n".encode())
        self.assertEqual(sb.files.read_text("/home/agent/work/a.txt"), "héllo\n")
        blob = bytes(range(256)) * 64
        sb.files.write("/home/agent/work/bin.dat", blob, mode=0o600)
        self.assertEqual(sb.files.read("/home/agent/work/bin.dat", format="bytes"), blob)
        self.assertEqual(b"".join(sb.files.read("/home/agent/work/bin.dat", format="stream")), blob)
        self.assertEqual(sb.files.stat("/home/agent/work/bin.dat").mode & 0o777, 0o600)
        sb.files.write("/home/agent/work/run.sh", "#!/bin/sh\necho ran\n", mode="0755")
        self.assertEqual(sb.commands.run(["/home/agent/work/run.sh"]).stdout, "ran\n")
        names = sorted(f.name for f in sb.files.list("/home/agent/work"))
        self.assertEqual(names, ["a.txt", "bin.dat", "run.sh", "sub"])
        self.assertTrue([f for f in sb.files.list("/home/agent/work") if f.name == "sub"][0].is_dir)
        sb.files.rename("/home/agent/work/a.txt", "/home/agent/work/sub/b.txt")
        self.assertFalse(sb.files.exists("/home/agent/work/a.txt"))
        self.assertEqual(sb.files.read_text("/home/agent/work/sub/b.txt"), "héllo\n")
        with self.assertRaises(stead.NotFoundError):
            sb.files.read("/home/agent/work/nope")
        sb.files.remove("/home/agent/work/bin.dat")
        sb.files.remove("/home/agent/work/sub", recursive=True)
        self.assertEqual(sorted(f.name for f in sb.files.list("/home/agent/work")), ["run.sh"])

        # checkpoint state with optimistic concurrency
        v1 = sb.state.put("progress", {"step": 1}, run="run-1")
        self.assertEqual(v1.version, 1)
        v2 = sb.state.put("progress", {"step": 2}, if_version=1)
        self.assertEqual(v2.version, 2)
        with self.assertRaises(stead.ConflictError):
            sb.state.put("progress", {"step": 99}, if_version=1)
        with self.assertRaises(stead.ConflictError):
            sb.state.put("progress", {"step": 99}, if_version=0)
        got = sb.state.get("progress")
        self.assertEqual((got.version, got.doc), (2, {"step": 2}))
        self.assertEqual(sb.state.get("progress", version=1).doc, {"step": 1})
        self.assertEqual(sb.state.get("progress", version=1).run, "run-1")
        hist = sb.state.history("progress")
        self.assertEqual([h.version for h in hist], [1, 2])
        rb = sb.state.rollback("progress", 1)
        self.assertEqual(rb.version, 3)
        self.assertEqual(sb.state.get("progress").doc, {"step": 1})
        self.assertIn("progress", [i.name for i in sb.checkpoints.list()])
        sb.state.put("plan", ["a", "b"], agent="planner")
        self.assertEqual(sb.state.get("plan", agent="planner").doc, ["a", "b"])
        with self.assertRaises(stead.NotFoundError):
            sb.state.get("no-such-doc")

        # snapshot, fork, rollback
        sb.files.write("/home/agent/marker", "before")
        snap = sb.snapshot(label="before")
        self.assertTrue(snap.id.startswith("snap-"))
        self.assertEqual(snap.label, "before")
        self.assertIn(snap.id, [s.id for s in sb.snapshots()])
        sb.files.write("/home/agent/marker", "after")
        forks = sb.fork(count=1)
        self.assertEqual(len(forks), 1)
        self.created.extend(forks)
        fork = forks[0]
        self.assertNotEqual(fork.id, sb.id)
        self.assertEqual(fork.files.read_text("/home/agent/marker"), "after")
        fork.files.write("/home/agent/marker", "fork")
        self.assertEqual(sb.files.read_text("/home/agent/marker"), "after")
        safety = sb.rollback(snap)
        self.assertEqual(safety.kind, "safety")
        self.assertEqual(sb.state, "running")
        self.assertEqual(sb.files.read_text("/home/agent/marker"), "before")
        from_snap = snap.fork(no_start=True)
        self.created.extend(from_snap)
        self.assertEqual(from_snap[0].state, "stopped")

        # lifecycle
        self.assertEqual(sb.pause().state, "paused")
        self.assertEqual(sb.resume().state, "running")
        self.assertEqual(sb.commands.run("echo up").stdout, "up\n")
        self.assertEqual(sb.stop().state, "stopped")
        with self.assertRaises(stead.ConflictError) as cm:
            sb.stop()  # already stopped: refused, nothing changed
        self.assertIn("already stopped", str(cm.exception))
        with self.assertRaises(stead.ConflictError) as cm:
            sb.pause()  # a stopped sandbox cannot be paused
        self.assertIn("stopped", str(cm.exception))
        self.assertEqual(sb.refresh().state, "stopped")
        self.assertEqual(sb.start().state, "running")
        sb.pause()
        again = stead.Sandbox.connect(sb.name, client=c)  # resumes a paused one
        self.assertEqual((again.id, again.state), (sb.id, "running"))
        sb.stop()
        again = stead.Sandbox.connect(sb.id, client=c)  # starts a stopped one
        self.assertEqual(again.state, "running")
        self.assertEqual(again.files.read_text("/home/agent/marker"), "before")
        self.assertEqual(again.state.get("progress").version, 3)

        # delete
        self.assertEqual(sb.delete().state, "deleted")
        self.assertNotIn(sb.id, [s.id for s in stead.Sandbox.list(client=c)])
        self.assertIn(sb.id, [s.id for s in stead.Sandbox.list(client=c, all=True)])
        sb.delete(purge=True)
        with self.assertRaises(stead.NotFoundError):
            sb.refresh()

    def test_secrets(self):
        c = self.client
        name = "PY_" + uuid.uuid4().hex[:8].upper()
        value = "sk-py-" + uuid.uuid4().hex
        s = stead.Secret.set(name, value, client=c)
        self.assertEqual(s.name, name)
        self.assertNotIn(value, repr(s.raw))
        with self.assertRaises(stead.InvalidError):
            self.new_sandbox(secrets=["PY_NOT_SET_" + uuid.uuid4().hex[:6].upper()])
        sb = self.new_sandbox(secrets=[name + "=API_KEY"], secret_files=[name + "=/run/secrets/key"])
        self.assertEqual(sb.commands.run("printenv API_KEY").stdout, value + "\n")
        self.assertEqual(sb.commands.run("cat /run/secrets/key").stdout, value)
        listed = [x for x in stead.Secret.list(client=c) if x.name == name]
        self.assertEqual(listed[0].used_by, [sb.name])
        with self.assertRaises(stead.ConflictError):
            stead.Secret.delete(name, client=c)  # in use
        stead.Secret.set(name, value + "-2", client=c)  # rotation: the next command sees it
        self.assertEqual(sb.commands.run("printenv API_KEY").stdout, value + "-2\n")
        sb.delete(purge=True)
        stead.Secret.delete(name, client=c)
        self.assertNotIn(name, [x.name for x in stead.Secret.list(client=c)])

    def test_volumes(self):
        c = self.client
        name = _unique("data")
        vol = stead.Volume.create(name, client=c)
        self.assertTrue(vol.id.startswith("vol-"))
        self.assertIn(vol.id, [v.id for v in stead.Volume.list(client=c)])
        a = self.new_sandbox(volumes=[name + ":/data"])
        b = self.new_sandbox(volumes=[{"volume": name, "path": "/shared", "read_only": True}])
        self.assertTrue(a.commands.run("echo shared > /data/note").ok)
        self.assertEqual(b.commands.run("cat /shared/note").stdout, "shared\n")
        # The files API sees the volume through its mount point too.
        a.files.write("/data/from-sdk", b"sdk")
        self.assertEqual(b.files.read("/shared/from-sdk"), "sdk")
        self.assertFalse(b.commands.run("echo x > /shared/other", check=False).ok)  # read-only
        with self.assertRaises(stead.ConflictError):
            stead.Volume.delete(name, client=c)  # in use
        # Mounts change only while stopped.
        with self.assertRaises(stead.ConflictError):
            a.attach_volume(name + "/sub:/more")
        a.stop()
        a.attach_volume(name + "/sub:/more:ro")
        self.assertIn("/more", [m["path"] for m in a.raw.get("volumes") or []])
        a.detach_volume("/more")
        self.assertNotIn("/more", [m["path"] for m in a.raw.get("volumes") or []])
        a.delete(purge=True)
        b.delete(purge=True)
        self.assertEqual(stead.Volume.delete(name, client=c).state, "deleted")
        self.assertNotIn(vol.id, [v.id for v in stead.Volume.list(client=c)])
        stead.Volume.delete(vol.id, purge=True, client=c)
        with self.assertRaises(stead.NotFoundError):
            stead.Volume.get(vol.id, client=c)

    def test_session_log(self):
        sb = self.new_sandbox()
        sb.files.mkdir("/workspace", parents=True)
        sb.files.write("/workspace/plan.md", "# plan\n1. never force-push\n")
        s = sb.session
        th = s.create_thread("main", retention={"keep_last": 1000})
        self.assertTrue(th.id.startswith("th-"))
        self.assertEqual(th.retention.get("keep_last"), 1000)
        with self.assertRaises(stead.ConflictError):
            s.create_thread("main")
        self.assertEqual([t.id for t in s.threads()], [th.id])
        run = s.start_run("main")  # by name
        self.assertTrue(run.id.startswith("run-"))
        self.assertEqual(run.status, "running")
        self.assertEqual([r.id for r in s.runs(th)], [run.id])

        # idempotent append: a retry with the same key returns the stored event
        mc = s.append(run, "model_call", {"prompt": "hi"}, model_session="ms-1")
        self.assertEqual((mc.seq, mc.type, mc.payload, mc.model_session), (1, "model_call", {"prompt": "hi"}, "ms-1"))
        intent = s.append(run, "tool_intent", {"tool": "send_email", "to": "a@b"}, idempotency_key="email-1")
        again = s.append(run, "tool_intent", {"tool": "send_email", "to": "a@b"}, idempotency_key="email-1")
        self.assertEqual(again.seq, intent.seq)
        self.assertEqual(intent.seq, 2)
        self.assertEqual(s.events(run).next, 2)  # nothing stored twice

        # a tool_intent without a result is in doubt, in resume and in orient
        r = s.resume(run)
        self.assertEqual([e.seq for e in r.in_doubt], [intent.seq])
        self.assertEqual(r.in_doubt[0].payload["tool"], "send_email")
        self.assertEqual(r.safe_point.seq, intent.seq)
        self.assertEqual(r.run.id, run.id)
        o = sb.orient()
        self.assertIn("IN DOUBT", o.text)
        self.assertIn("send_email", o.text)
        self.assertEqual(o.run.run.id, run.id)
        self.assertEqual([e.seq for e in o.run.in_doubt], [intent.seq])
        self.assertEqual([e.seq for e in o.recent_events], [1, 2])
        self.assertEqual(o.sandbox.id, sb.id)
        self.assertEqual([(f.path, f.tail) for f in o.files], [("/workspace/plan.md", "# plan\n1. never force-push")])
        self.assertIn("never force-push", o.text)
        self.assertEqual(sb.orient(files=["/workspace/nope.md"]).files, [])
        self.assertEqual(sb.orient(events=1).recent_events[0].seq, 2)

        # a batch, all or nothing; a result answers the intent
        evs = s.append_many(run, [
            {"type": "tool_result", "payload": {"ok": True}, "intent": intent.seq},
            ("checkpoint", {"step": 1}),
        ])
        self.assertEqual([(e.seq, e.type) for e in evs], [(3, "tool_result"), (4, "checkpoint")])
        self.assertEqual(evs[0].intent, intent.seq)
        r = s.resume(run)
        self.assertEqual(r.in_doubt, [])
        self.assertEqual((r.safe_point.seq, r.safe_point.type), (4, "checkpoint"))
        self.assertNotIn("IN DOUBT", sb.orient().text)

        # paging
        page = s.events(run, after=1, limit=2)
        self.assertEqual(([e.seq for e in page], page.next, page.more), ([2, 3], 3, True))
        page = s.events(run, after=page.next)
        self.assertEqual(([e.seq for e in page], page.more, page.run_status), ([4], False, "running"))

        # follow: stored events first, then each as it is appended, until the end
        got, errors = [], []
        first = threading.Event()

        def follower():
            try:
                for e in s.follow(run, after=2):
                    got.append(e)
                    first.set()
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)
                first.set()

        t = threading.Thread(target=follower, daemon=True)
        t.start()
        self.assertTrue(first.wait(30), "follow delivered nothing")
        s.append(run, "note", "live 1")
        s.append(run, "note", "live 2")
        ended = s.end(run)
        self.assertEqual(ended.status, "completed")
        t.join(30)
        self.assertFalse(t.is_alive(), "follow did not stop at the end of the run")
        self.assertEqual(errors, [])
        self.assertEqual([(e.seq, e.payload) for e in got][2:], [(5, "live 1"), (6, "live 2")])
        self.assertEqual([e.seq for e in got], [3, 4, 5, 6])
        # following an ended run yields what is stored and stops
        self.assertEqual([e.seq for e in s.follow(run, after=4)], [5, 6])

        with self.assertRaises(stead.ConflictError):
            s.append(run, "note", "too late")
        with self.assertRaises(stead.ConflictError):
            s.end(run)
        run2 = s.start_run(th)
        self.assertEqual(s.end(run2, status="interrupted").status, "interrupted")

    def test_network_and_ports(self):
        # Needs the network routes (GET/PUT /v1/sandboxes/{id}/network,
        # /ports), served once the daemon's backend implements
        # api.NetworkBackend; before that, GET network of a sandbox that
        # exists is a 404 and the test says so (TestPythonSDK fails on it).
        sb = self.new_sandbox(network={"deny": ["192.0.2.0/24"]}, auto_resume=True)
        try:
            n = sb.get_network()
        except stead.NotFoundError:
            self.skipTest("the daemon serves no network routes (its backend does not implement NetworkBackend)")
        self.assertTrue(sb.auto_resume)
        self.assertEqual(sb.network.deny, ["192.0.2.0/24"])
        self.assertEqual(n.policy.deny, ["192.0.2.0/24"])
        self.assertTrue(n.policy.internet)
        if n.enabled:
            self.assertTrue(n.address)
            self.assertEqual(sb.refresh().address, n.address)
        n = sb.set_network(allow=["*.pypi.org"], internet=False)
        self.assertEqual((n.policy.internet, n.policy.allow, n.policy.deny), (False, ["*.pypi.org"], ["192.0.2.0/24"]))
        self.assertEqual(sb.get_network().policy.allow, ["*.pypi.org"])
        with self.assertRaises(stead.InvalidError):
            sb.set_network(deny=["not a valid entry"])
        self.assertEqual(sb.list_ports(), [])
        if not n.enabled:
            # Without networking there is no port proxy: 501.
            with self.assertRaises(stead.SteadError) as cm:
                sb.expose_port(8080)
            self.assertEqual(cm.exception.status, 501)
            return
        ep = sb.expose_port(8080)
        self.assertEqual((ep.port, ep.public), (8080, False))
        self.assertTrue(ep.token)
        again = sb.expose_port(8080)
        self.assertNotEqual(again.token, ep.token)  # exposing again rotates the token
        pub = sb.expose_port(3000, public=True)
        self.assertEqual((pub.public, pub.token), (True, ""))
        self.assertEqual([(p.port, p.public) for p in sb.list_ports()], [(3000, True), (8080, False)])
        sb.unexpose_port(8080)
        with self.assertRaises(stead.NotFoundError):
            sb.unexpose_port(8080)
        self.assertEqual([p.port for p in sb.get_network().ports], [3000])

    def test_tasks_observations_kv(self):
        sb = self.new_sandbox(no_start=True)
        # tasks
        t = sb.tasks.add("write-tests", {"file": "a_test.go"})
        self.assertEqual((t.id, t.state, t.payload), ("write-tests", "open", {"file": "a_test.go"}))
        gen = sb.tasks.add()
        self.assertTrue(gen.id.startswith("task-"))
        with self.assertRaises(stead.ConflictError):
            sb.tasks.add("write-tests")
        t = sb.tasks.set_state("write-tests", "in_progress", if_state="open")
        self.assertEqual(t.state, "in_progress")
        with self.assertRaises(stead.ConflictError):
            sb.tasks.set_state("write-tests", "in_progress", if_state="open")  # not open any more
        with self.assertRaises(stead.ConflictError):
            sb.tasks.set_state(gen.id, "done")  # open -> done is not a legal move
        self.assertEqual(sb.tasks.get(gen.id).state, "open")
        t = sb.tasks.set_state("write-tests", "done", payload={"file": "a_test.go", "passed": True})
        self.assertEqual((t.state, t.payload["passed"]), ("done", True))
        self.assertEqual(sb.tasks.get("write-tests").state, "done")
        self.assertEqual([x.id for x in sb.tasks.list(open=True)], [gen.id])
        self.assertEqual([x.id for x in sb.tasks.list(state="done")], ["write-tests"])
        self.assertEqual(sorted(x.id for x in sb.tasks.list(state=["open", "done"])), sorted([gen.id, "write-tests"]))
        self.assertEqual(len(sb.tasks.list()), 2)
        self.assertEqual(sb.tasks.list(created_after="2999-01-01T00:00:00Z"), [])
        with self.assertRaises(stead.NotFoundError):
            sb.tasks.get("no-such-task")
        self.assertEqual([x.id for x in sb.orient().open_tasks], [gen.id])

        # observations
        o1 = sb.observations.add("test_result", {"passed": 3})
        o2 = sb.observations.add("lint", {"warnings": 0})
        o3 = sb.observations.add("test_result", {"passed": 4})
        self.assertEqual([o1.seq, o2.seq, o3.seq], [1, 2, 3])
        self.assertTrue(o1.principal)
        self.assertEqual([o.seq for o in sb.observations.list()], [1, 2, 3])
        self.assertEqual([o.payload["passed"] for o in sb.observations.list(kind="test_result")], [3, 4])
        self.assertEqual([o.seq for o in sb.observations.list(after=1)], [2, 3])

        # key-value with optimistic concurrency
        e = sb.kv.put("plan/next", {"step": 1}, if_version=0)
        self.assertEqual((e.key, e.version, e.value), ("plan/next", 1, {"step": 1}))
        e = sb.kv.put("plan/next", {"step": 2}, if_version=1)
        self.assertEqual(e.version, 2)
        with self.assertRaises(stead.ConflictError):
            sb.kv.put("plan/next", {"step": 99}, if_version=1)
        with self.assertRaises(stead.ConflictError):
            sb.kv.put("plan/next", {"step": 99}, if_version=0)  # exists already
        self.assertEqual(sb.kv.get("plan/next").value, {"step": 2})
        sb.kv.put("plan/done", ["a"])
        sb.kv.put("other", 7)
        self.assertEqual([x.key for x in sb.kv.list(prefix="plan/")], ["plan/done", "plan/next"])
        self.assertEqual(len(sb.kv.list()), 3)
        with self.assertRaises(stead.ConflictError):
            sb.kv.delete("plan/next", if_version=1)
        sb.kv.delete("plan/next", if_version=2)
        sb.kv.delete("other")
        with self.assertRaises(stead.NotFoundError):
            sb.kv.get("plan/next")
        self.assertEqual([x.key for x in sb.kv.list()], ["plan/done"])


if __name__ == "__main__":
    unittest.main()
