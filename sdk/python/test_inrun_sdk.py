"""Unit tests of inrun_sdk under plain CPython: ``python3 -m unittest`` in sdk/python
(host/tests/lang_python.rs runs them too)."""

import datetime
import json
import unittest

from inrun_sdk import Err, Outcome, Request, _wit, export_hooks, export_reconciler


def wit_request(obj, args=None, finalizing=False):
    return Request.for_object(obj, args).to_wit() if not finalizing else _wit.Request(
        "ns/a", "v1", "K", json.dumps(obj), "{}", True, None, None)


SHOP = {"apiVersion": "demo.inrun.dev/v1alpha1", "kind": "WebApp",
        "metadata": {"name": "shop", "namespace": "prod"}, "spec": {"image": "nginx"}}


class RequestTest(unittest.TestCase):
    def test_name_namespace_and_spec_come_from_the_object_or_the_key(self):
        req = Request.for_object(SHOP)
        self.assertEqual((req.key, req.name, req.namespace), ("prod/shop", "shop", "prod"))
        self.assertEqual(req.spec, {"image": "nginx"})
        bare = Request("ns/x", "v1", "K", {}, {})
        self.assertEqual((bare.name, bare.namespace, bare.spec), ("x", "ns", None))
        self.assertIsNone(Request("x", "v1", "K", {}, {}).namespace)

    def test_args_are_checked_by_type_and_presence(self):
        req = Request.for_object(SHOP, {"team": 7, "none": None})
        self.assertEqual(req.arg("team", int), 7)
        self.assertIsNone(req.optional_arg("none", str))
        with self.assertRaises(Err) as e:
            req.optional_arg("team", str)
        self.assertEqual(e.exception.value, "args.team: invalid type: integer `7`, expected a string")
        with self.assertRaises(Err) as e:
            req.arg("missing")
        self.assertEqual(e.exception.value, "args.missing is required")

    def test_a_request_round_trips_through_the_wit_record(self):
        req = Request.for_object(SHOP, {"a": [1, 2]})
        back = Request.from_wit(req.to_wit())
        self.assertEqual((back.key, back.object, back.args), (req.key, SHOP, {"a": [1, 2]}))

    def test_bad_json_from_the_host_is_an_error_naming_the_field(self):
        wit = Request.for_object(SHOP).to_wit()
        wit.object = "{"
        with self.assertRaises(Err) as e:
            Request.from_wit(wit)
        self.assertTrue(e.exception.value.startswith("request.object is not valid JSON"))


class OutcomeTest(unittest.TestCase):
    def test_the_builder_writes_json_text_and_sorted_pairs(self):
        wit = (Outcome().resource({"kind": "ConfigMap"}).intent("deployment", {"image": "x"})
               .status("a", 1).status_object({"b": True}).label("z", "1").label("a", "2")
               .annotation("c", "d").to_wit())
        self.assertEqual(wit.resources, ['{"kind":"ConfigMap"}',
                                         '{"type":"deployment","fields":{"image":"x"}}'])
        self.assertEqual(json.loads(wit.status), {"a": 1, "b": True})
        self.assertEqual(wit.labels, [("a", "2"), ("z", "1")])
        self.assertEqual(wit.annotations, [("c", "d")])
        self.assertEqual((wit.requeue, wit.requeue_after_ms, wit.cleanup), (False, None, None))

    def test_durations_cross_as_milliseconds_and_rounded_up_seconds(self):
        wit = (Outcome().requeue().requeue_after(1.5)
               .cleanup_after(datetime.timedelta(milliseconds=200)).to_wit())
        self.assertTrue(wit.requeue)
        self.assertEqual(wit.requeue_after_ms, 1500)
        self.assertEqual(wit.cleanup.after_seconds, 1)

    def test_conditions_and_events_cross_as_the_0_2_0_record_and_round_trip(self):
        out = (Outcome().condition("Sized", True, "SizeSet", "size is 3")
               .condition("Synced", None, "Waiting").condition("Sized", False, "NoSize")
               .event("Resized", "size 3").event("QuotaLow", "near", warning=True))
        wit = out.to_wit()
        self.assertEqual([(c.type, c.status) for c in wit.conditions],
                         [("Synced", None), ("Sized", False)])
        self.assertEqual([e.type.name for e in wit.events], ["NORMAL", "WARNING"])
        self.assertEqual(Outcome.from_wit(wit), out)

    def test_an_outcome_round_trips_and_a_bad_status_is_refused(self):
        out = Outcome().resource({"a": 1}).status("s", "x").label("l", "v").cleanup_after(600)
        self.assertEqual(Outcome.from_wit(out.to_wit()), out)
        wit = out.to_wit()
        wit.status = "[1]"
        with self.assertRaises(Err) as e:
            Outcome.from_wit(wit)
        self.assertEqual(e.exception.value, "outcome.status is not a JSON object")

    def test_an_empty_outcome_writes_nothing_even_when_it_requeues(self):
        self.assertTrue(Outcome().requeue().is_empty())
        self.assertFalse(Outcome().status("a", 1).is_empty())


class ExportTest(unittest.TestCase):
    def test_a_reconciler_gets_the_parsed_request_and_its_err_passes_through(self):
        def reconcile(req):
            if req.finalizing:
                raise Err("finalizing")
            return Outcome().status("name", req.name)

        world = export_reconciler(reconcile)()
        self.assertEqual(world.reconcile(wit_request(SHOP)).status, '{"name":"shop"}')
        with self.assertRaises(Err) as e:
            world.reconcile(wit_request(SHOP, finalizing=True))
        self.assertEqual(e.exception.value, "finalizing")

    def test_an_uncaught_exception_becomes_an_err_with_type_message_and_line(self):
        def reconcile(req):
            return {}["missing"]

        with self.assertRaises(Err) as e:
            export_reconciler(reconcile)().reconcile(wit_request(SHOP))
        self.assertRegex(e.exception.value,
                         r"^reconcile raised KeyError: 'missing' \(at test_inrun_sdk.py:\d+ in reconcile\)$")

    def test_an_err_that_is_not_a_string_becomes_its_text(self):
        def reconcile(req):
            raise Err(42)

        with self.assertRaises(Err) as e:
            export_reconciler(reconcile)().reconcile(wit_request(SHOP))
        self.assertEqual(e.exception.value, "42")

    def test_returning_something_else_than_an_outcome_is_an_error(self):
        with self.assertRaises(Err) as e:
            export_reconciler(lambda req: None)().reconcile(wit_request(SHOP))
        self.assertEqual(e.exception.value, "reconcile returned NoneType, not an Outcome")

    def test_a_warm_up_runs_the_functions_on_each_cr_at_import_quietly(self):
        import inrun_sdk
        seen = []
        logged = []
        real_host = inrun_sdk._host
        inrun_sdk._host = type("Host", (), {"log": staticmethod(lambda level, msg: logged.append(msg))})

        def reconcile(req):
            seen.append(req.name)
            inrun_sdk.info("not logged while warming up")
            if req.name == "bad":
                raise Err("refused")
            return Outcome()

        try:
            export_reconciler(reconcile, warm_up=[SHOP, Request.for_object({"metadata": {"name": "bad"}})])
            self.assertEqual(seen, ["shop", "shop", "bad", "bad"])
            self.assertEqual(logged, [])
            inrun_sdk.info("logged again")
            self.assertEqual(logged, ["logged again"])
        finally:
            inrun_sdk._host = real_host
        called = []
        world = export_hooks({"a": lambda req, cur: called.append(("a", req.name, cur.is_empty())) or cur,
                              "b": lambda req, cur: called.append(("b", req.name)) or cur},
                             warm_up=[SHOP])()
        self.assertEqual(called, [("a", "shop", True)] * 2 + [("b", "shop")] * 2)
        self.assertEqual(world.functions(), ["a", "b"])
        with self.assertRaises(TypeError):
            export_reconciler(reconcile, warm_up=SHOP)
        with self.assertRaisesRegex(TypeError, "expected CR objects"):
            export_reconciler(reconcile, warm_up=["shop"])

    def test_hooks_list_their_functions_and_refuse_others(self):
        world = export_hooks({"tag": lambda req, cur: cur.label("tagged", "yes")})()
        self.assertEqual(world.functions(), ["tag"])
        current = Outcome().label("kept", "1").to_wit()
        out = world.call("tag", wit_request(SHOP), current)
        self.assertEqual(out.labels, [("kept", "1"), ("tagged", "yes")])
        with self.assertRaises(Err) as e:
            world.call("nope", wit_request(SHOP), current)
        self.assertEqual(e.exception.value, "unknown hook function `nope`; this plugin has: tag")


if __name__ == "__main__":
    unittest.main()


class PackageValidateTest(unittest.TestCase):
    @staticmethod
    def options():
        from types import SimpleNamespace

        return SimpleNamespace(
            config="{}", profile="p", state="present", event=SimpleNamespace(name="CHANGED"),
            resource=SimpleNamespace(group="g", version="v1", plural="dbs", kind="Db"),
            namespace="ns", name="n",
        )

    def test_problems_judge_the_spec_and_an_exception_fails_the_step(self):
        from inrun_package import export_package

        class Judging:
            def validate(self, opts):
                return ["size: too big"]

        self.assertEqual(export_package(Judging())().validate(self.options()), ["size: too big"])

        class Failing:
            def validate(self, opts):
                raise ConnectionError("backend down")

        # Raised through (a trap in the component): retried, not ValidationFailed.
        with self.assertRaises(ConnectionError):
            export_package(Failing())().validate(self.options())
