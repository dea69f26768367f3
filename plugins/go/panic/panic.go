// Package panics is a test guest: it logs a line, then panics, which traps the component.
// The host must fail only this call.
package panics

import "inrun.dev/sdk/inrun"

func init() { inrun.ExportReconciler(Reconcile) }

// Reconcile panics.
func Reconcile(req *inrun.Request) (*inrun.Outcome, error) {
	inrun.Log.Errorf("about to panic")
	var missing map[string]int
	missing[req.Key]++ // assignment to entry in nil map
	return nil, nil
}
