package inrun

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestAnOutcomeIsWrittenAsTheRustSDKWritesIt(t *testing.T) {
	o := NewOutcome().
		AddResource(Object{"kind": "Service", "metadata": Object{"name": "a<b>&c"}, "apiVersion": "v1"}).
		AddIntent("deployment", Object{"image": "nginx"}).
		SetStatus("replicas", 3).
		SetStatus("big", mustParse("12345678901234567890")).
		SetLabel("z", "1").
		SetLabel("a", "2").
		SetAnnotation("note", "x").
		RequeueIn(1500 * time.Millisecond).
		CleanupIn(1500 * time.Millisecond)
	w, err := o.Wire()
	if err != nil {
		t.Fatal(err)
	}
	if got := w.Resources[0]; got != `{"apiVersion":"v1","kind":"Service","metadata":{"name":"a<b>&c"}}` {
		t.Errorf("resource: %s", got)
	}
	if got := w.Resources[1]; got != `{"fields":{"image":"nginx"},"type":"deployment"}` {
		t.Errorf("intent: %s", got)
	}
	if *w.Status != `{"big":12345678901234567890,"replicas":3}` {
		t.Errorf("status: %s", *w.Status)
	}
	if !reflect.DeepEqual(w.Labels, [][2]string{{"a", "2"}, {"z", "1"}}) {
		t.Errorf("labels: %v", w.Labels)
	}
	if *w.RequeueAfterMs != 1500 || *w.CleanupAfterSeconds != 2 {
		t.Errorf("requeue %d ms, cleanup %d s (rounded up)", *w.RequeueAfterMs, *w.CleanupAfterSeconds)
	}
}

func TestAnOutcomeRoundTripsThroughTheWireRecord(t *testing.T) {
	status := `{"n":-3,"phase":"Rendered","ratio":0.25}`
	ms, secs := uint64(1500), uint32(30)
	w := WireOutcome{
		Status:              &status,
		Resources:           []string{`{"fields":{"big":12345678901234567890},"type":"deployment"}`, `{"kind":"Service","metadata":"not a map"}`},
		Labels:              [][2]string{{"kept", "yes"}},
		Annotations:         [][2]string{{"note", `a "quoted" é value`}},
		Requeue:             true,
		RequeueAfterMs:      &ms,
		CleanupAfterSeconds: &secs,
		Conditions:          []Condition{{Type: "Sized", Status: Unknown, Reason: "R", Message: "m"}},
		Events:              []Event{{Type: Warning, Reason: "R", Message: "m"}},
	}
	o, err := ParseOutcome(w)
	if err != nil {
		t.Fatal(err)
	}
	back, err := o.Wire()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, w) {
		t.Fatalf("round trip:\n%#v\n%#v", back, w)
	}
}

func TestANullStatusIsNoStatusAndAStatusThatIsNotAnObjectIsAnError(t *testing.T) {
	null := "null"
	o, err := ParseOutcome(WireOutcome{Status: &null})
	if err != nil || o.Status != nil {
		t.Fatalf("null: %v %v", err, o.Status)
	}
	list := "[1]"
	if _, err := ParseOutcome(WireOutcome{Status: &list}); err == nil || err.Error() != "outcome.status is not a JSON object" {
		t.Fatalf("list: %v", err)
	}
}

func TestConditionsReplaceByTypeAndEventsAccumulate(t *testing.T) {
	o := NewOutcome().
		SetCondition("Sized", False, "NoSize", "none").
		SetCondition("Linked", True, "Found", "").
		SetCondition("Sized", True, "SizeSet", "size is 2").
		AddEvent("Resized", "size 2").
		AddWarning("Missing", "no upstream")
	want := []Condition{{"Sized", True, "SizeSet", "size is 2"}, {"Linked", True, "Found", ""}}
	if !reflect.DeepEqual(o.Conditions, want) {
		t.Errorf("conditions: %v", o.Conditions)
	}
	if len(o.Events) != 2 || o.Events[1].Type != Warning {
		t.Errorf("events: %v", o.Events)
	}
}

func TestTheExportedReconcilerAndHooksAnswerTheGlue(t *testing.T) {
	ExportReconciler(func(req *Request) (*Outcome, error) {
		if req.Spec() == nil {
			return nil, errors.New("spec is required")
		}
		return NewOutcome().SetStatus("name", req.Name()), nil
	})
	req, _ := webapp(Object{"a": 1}, nil).Wire()
	out, err := Reconcile(req)
	if err != nil || *out.Status != `{"name":"shop"}` {
		t.Fatalf("reconcile: %v %v", err, out.Status)
	}
	bare, _ := webapp(nil, nil).Wire()
	bare.Object = `{"metadata":{"name":"shop"}}`
	if _, err := Reconcile(bare); err == nil || err.Error() != "spec is required" {
		t.Fatalf("error: %v", err)
	}

	ExportHooks(
		Hook{"first", func(_ *Request, cur *Outcome) (*Outcome, error) { return cur.SetLabel("first", "1"), nil }},
		Hook{"second", func(*Request, *Outcome) (*Outcome, error) { return nil, nil }},
	)
	if got := HookFunctions(); !reflect.DeepEqual(got, []string{"first", "second"}) {
		t.Fatalf("functions: %v", got)
	}
	out, err = CallHook("first", req, WireOutcome{Labels: [][2]string{{"kept", "yes"}}})
	if err != nil || !reflect.DeepEqual(out.Labels, [][2]string{{"first", "1"}, {"kept", "yes"}}) {
		t.Fatalf("first: %v %v", err, out.Labels)
	}
	if out, err = CallHook("second", req, WireOutcome{}); err != nil || len(out.Resources) != 0 {
		t.Fatalf("a nil outcome is an empty one: %v %v", err, out)
	}
	if _, err := CallHook("third", req, WireOutcome{}); err == nil || !strings.Contains(err.Error(), "unknown hook function `third`") {
		t.Fatalf("unknown: %v", err)
	}
}
