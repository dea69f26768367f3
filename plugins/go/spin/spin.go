// Package spin is a test guest: an endless loop. The host must interrupt it at its
// deadline, and the next call must work.
package spin

import "inrun.dev/sdk/inrun"

// Spins counts the loop's turns (a package variable, so the loop is not removed).
var Spins uint64

func init() { inrun.ExportReconciler(Reconcile) }

// Reconcile never returns.
func Reconcile(*inrun.Request) (*inrun.Outcome, error) {
	for {
		Spins++
	}
}
