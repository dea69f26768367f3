"""Unit tests of app.py under plain CPython: ``.venv/bin/python -m unittest`` (after ./build.sh)."""

import unittest

from inrun_sdk import Err, Request

from app import reconcile


def request(spec):
    return Request.for_object({
        "apiVersion": "example.inrun.dev/v1alpha1",
        "kind": "@KIND@",
        "metadata": {"name": "sample", "namespace": "default"},
        "spec": spec,
    })


class ReconcileTest(unittest.TestCase):
    def test_the_message_becomes_a_config_map_and_the_status(self):
        out = reconcile(request({"message": "hi"}))
        self.assertEqual(len(out.resources), 1)
        cm = out.resources[0]
        self.assertEqual((cm["kind"], cm["metadata"]["name"]), ("ConfigMap", "sample"))
        self.assertEqual(cm["data"]["message"], "hi")
        self.assertEqual(out.status_fields["message"], "hi")

    def test_a_message_that_is_not_text_is_refused(self):
        with self.assertRaises(Err):
            reconcile(request({"message": 3}))


if __name__ == "__main__":
    unittest.main()
