// The outcome record of the 0.1.0 contract (wit/): no conditions or events.
package export_wit_world

import (
	"inrun.dev/sdk/inrun"
	wit_types "wit_component/inrun_reconciler_0_1_0_types"
)

type witOutcome = wit_types.Outcome

func toWit(o inrun.WireOutcome) (witOutcome, error) {
	if len(o.Conditions) > 0 || len(o.Events) > 0 {
		return witOutcome{}, inrun.ErrNeedsContract020
	}
	var cleanup *wit_types.Cleanup
	if o.CleanupAfterSeconds != nil {
		cleanup = &wit_types.Cleanup{AfterSeconds: *o.CleanupAfterSeconds}
	}
	return witOutcome{
		Status:         optionalPtr(o.Status),
		Resources:      o.Resources,
		Labels:         pairs(o.Labels),
		Annotations:    pairs(o.Annotations),
		Requeue:        o.Requeue,
		RequeueAfterMs: optionalPtr(o.RequeueAfterMs),
		Cleanup:        optionalPtr(cleanup),
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
	return w
}
