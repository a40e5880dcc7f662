"""Tests of the event log and webhook calls of the stead Python SDK.

The signature test needs no daemon (its vector was made by the Go
client's SignWebhook); the live test runs against STEAD_ENDPOINT.
"""

from __future__ import annotations

import os
import sys
import threading
import unittest
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import stead  # noqa: E402

LIVE = bool(os.environ.get("STEAD_ENDPOINT"))

BODY = b'{"id":1,"type":"sandbox.created"}'
HEADER = "t=1800000000,v1=925c723cd7199986c3b74971539ddc73261f5e4a850f4237f8226a415c22c5cb"


class VerifyWebhookTest(unittest.TestCase):
    def test_go_signature_verifies(self):
        self.assertTrue(stead.verify_webhook("whsec_test", HEADER, BODY, now=1800000010))
        self.assertTrue(stead.verify_webhook(b"whsec_test", HEADER, BODY, tolerance=-1))

    def test_tampering_and_age_refused(self):
        self.assertFalse(stead.verify_webhook("whsec_test", HEADER, BODY + b" ", now=1800000010))
        self.assertFalse(stead.verify_webhook("other", HEADER, BODY, now=1800000010))
        self.assertFalse(stead.verify_webhook("whsec_test", HEADER, BODY, now=1800000000 + 301))
        self.assertFalse(stead.verify_webhook("whsec_test", HEADER.replace("t=", "t=0"), BODY, tolerance=-1))
        self.assertFalse(stead.verify_webhook("whsec_test", "t=1800000000", BODY, tolerance=-1))
        self.assertFalse(stead.verify_webhook("whsec_test", "", BODY))

    def test_rotation_second_signature(self):
        h = "t=1800000000,v1=" + "0" * 64 + "," + HEADER.split(",")[1]
        self.assertTrue(stead.verify_webhook("whsec_test", h, BODY, tolerance=-1))


@unittest.skipUnless(LIVE, "needs STEAD_ENDPOINT (a live daemon)")
class LiveEventsTest(unittest.TestCase):
    def test_list_stream_resume_and_webhooks(self):
        name = "py-ev-" + uuid.uuid4().hex[:8]
        sb = stead.Sandbox.create(name=name)
        try:
            sb.stop()
            page = stead.list_events(sandbox=name, types=["sandbox."])
            types = [e["type"] for e in page["items"]]
            self.assertIn("sandbox.created", types)
            self.assertIn("sandbox.stopped", types)
            first, last = page["items"][0]["id"], page["items"][-1]["id"]
            # A stream resumed after the first event: the rest, then live.
            got = []
            done = threading.Event()

            def follow():
                for e in stead.stream_events(after=first, sandbox=sb.id):
                    got.append(e)
                    if e["type"] == "sandbox.started" and e["id"] > last:
                        done.set()
                        return

            threading.Thread(target=follow, daemon=True).start()
            sb.start()
            self.assertTrue(done.wait(30), "no sandbox.started on the stream: %r" % got)
            self.assertEqual([e["id"] for e in got[: len(page["items"]) - 1]], [e["id"] for e in page["items"][1:]])
            ids = [e["id"] for e in got]
            self.assertEqual(ids, sorted(set(ids)))
        finally:
            sb.delete(purge=True)
        hook = stead.create_webhook("http://10.255.255.1:9/hook", types=["sandbox."])
        try:
            self.assertTrue(hook["secret"])
            listed = [h for h in stead.list_webhooks() if h["id"] == hook["id"]]
            self.assertEqual(len(listed), 1)
            self.assertNotIn("secret", listed[0])
            self.assertEqual(stead.webhook_deliveries(hook["id"]), [])
            with self.assertRaises(stead.InvalidError):
                stead.create_webhook("http://169.254.169.254/")
        finally:
            stead.delete_webhook(hook["id"])
        with self.assertRaises(stead.NotFoundError):
            stead.webhook_deliveries(hook["id"])


if __name__ == "__main__":
    unittest.main()
