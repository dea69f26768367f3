// The outcome record of the 0.2.0 contract (wit/0.2.0): 0.1.0's plus conditions and events.
package export_wit_world

import (
	witTypes "go.bytecodealliance.org/pkg/wit/types"
	"inrun.dev/sdk/inrun"
	wit_types1 "wit_component/inrun_reconciler_0_1_0_types"
	wit_types "wit_component/inrun_reconciler_0_2_0_types"
)

type witOutcome = wit_types.Outcome

func toWit(o inrun.WireOutcome) (witOutcome, error) {
	var cleanup *wit_types1.Cleanup
	if o.CleanupAfterSeconds != nil {
		cleanup = &wit_types1.Cleanup{AfterSeconds: *o.CleanupAfterSeconds}
	}
	conditions := make([]wit_types.Condition, len(o.Conditions))
	for i, c := range o.Conditions {
		status := witTypes.None[bool]()
		switch c.Status {
		case inrun.True:
			status = witTypes.Some(true)
		case inrun.False:
			status = witTypes.Some(false)
		}
		conditions[i] = wit_types.Condition{Type: c.Type, Status: status, Reason: c.Reason, Message: c.Message}
	}
	events := make([]wit_types.Event, len(o.Events))
	for i, e := range o.Events {
		kind := wit_types.EventType_Normal
		if e.Type == inrun.Warning {
			kind = wit_types.EventType_Warning
		}
		events[i] = wit_types.Event{Type: kind, Reason: e.Reason, Message: e.Message}
	}
	return witOutcome{
		Status:         optionalPtr(o.Status),
		Resources:      o.Resources,
		Labels:         pairs(o.Labels),
		Annotations:    pairs(o.Annotations),
		Requeue:        o.Requeue,
		RequeueAfterMs: optionalPtr(o.RequeueAfterMs),
		Cleanup:        optionalPtr(cleanup),
		Conditions:     conditions,
		Events:         events,
	}, nil
}

func fromWit(o witOutcome) inrun.WireOutcome {
	w := inrun.WireOutcome{
		Status:         ptr(o.Status),
		Resources:      o.Resources,
		Labels:         unpairs(o.Labels),
		Annotations:    unpairs(o.Annotations),
		Requeue:        o.Requeue,
		RequeueAfterMs: ptr(o.RequeueAfterMs),
	}
	if o.Cleanup.IsSome() {
		secs := o.Cleanup.Some().AfterSeconds
		w.CleanupAfterSeconds = &secs
	}
	for _, c := range o.Conditions {
		status := inrun.Unknown
		if c.Status.IsSome() {
			status = inrun.False
			if c.Status.Some() {
				status = inrun.True
			}
		}
		w.Conditions = append(w.Conditions, inrun.Condition{Type: c.Type, Status: status, Reason: c.Reason, Message: c.Message})
	}
	for _, e := range o.Events {
		kind := inrun.Normal
		if e.Type == wit_types.EventType_Warning {
			kind = inrun.Warning
		}
		w.Events = append(w.Events, inrun.Event{Type: kind, Reason: e.Reason, Message: e.Message})
	}
	return w
}
