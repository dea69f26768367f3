package inrun

import (
	"errors"
	"fmt"
)

// ReconcileFunc decides what the CR should become. A returned error fails this reconcile
// with its message (the host records a ReconcileError event and retries with backoff).
type ReconcileFunc func(req *Request) (*Outcome, error)

// HookFunc adjusts the outcome the Blueprint's templates (and earlier hooks) rendered and
// returns the new one; it may edit current in place and return it.
type HookFunc func(req *Request, current *Outcome) (*Outcome, error)

// Hook is one named hook function.
type Hook struct {
	// Name is what the Blueprint's reconcile.hooks[].function names.
	Name string
	// Func is the function.
	Func HookFunc
}

var (
	reconciler ReconcileFunc
	hooks      []Hook
)

// ExportReconciler makes fn the component's reconcile export (world reconciler). Call it
// from an init function of the plugin's package:
//
//	func init() { inrun.ExportReconciler(Reconcile) }
func ExportReconciler(fn ReconcileFunc) {
	reconciler = fn
}

// ExportHooks makes these the component's hook functions (world hooks), listed by
// functions() in this order. Call it from an init function of the plugin's package.
func ExportHooks(list ...Hook) {
	hooks = append([]Hook(nil), list...)
}

// Reconcile runs the exported reconciler on a request from the host: what the SDK's glue
// calls for the reconcile export.
func Reconcile(w WireRequest) (WireOutcome, error) {
	if reconciler == nil {
		return WireOutcome{}, errors.New("no reconciler: call inrun.ExportReconciler from the plugin's init")
	}
	req, err := ParseRequest(w)
	if err != nil {
		return WireOutcome{}, err
	}
	out, err := reconciler(req)
	if err != nil {
		return WireOutcome{}, err
	}
	if out == nil {
		out = NewOutcome()
	}
	return out.Wire()
}

// HookFunctions lists the exported hook functions' names: what the glue answers for the
// functions export.
func HookFunctions() []string {
	names := make([]string, len(hooks))
	for i, h := range hooks {
		names[i] = h.Name
	}
	return names
}

// CallHook runs the exported hook function on the outcome so far: what the glue calls for
// the call export. An unlisted name is the error "unknown hook function `NAME`".
func CallHook(function string, w WireRequest, current WireOutcome) (WireOutcome, error) {
	for _, h := range hooks {
		if h.Name != function {
			continue
		}
		req, err := ParseRequest(w)
		if err != nil {
			return WireOutcome{}, err
		}
		cur, err := ParseOutcome(current)
		if err != nil {
			return WireOutcome{}, err
		}
		out, err := h.Func(req, cur)
		if err != nil {
			return WireOutcome{}, err
		}
		if out == nil {
			out = NewOutcome()
		}
		return out.Wire()
	}
	return WireOutcome{}, fmt.Errorf("unknown hook function `%s`", function)
}
