// Package reporter is a test guest, the Go twin of the Rust `reporter` (built against
// wit/0.2.0). It returns one ConfigMap `<name>-report` holding spec.size, a condition
// Sized (True when spec.size is at least 1) and a Resized event naming the size (and, with spec.spoof, a Ready condition the host must drop).
package reporter

import (
	"fmt"

	"inrun.dev/sdk/inrun"
)

func init() { inrun.ExportReconciler(Reconcile) }

// Reconcile reports spec.size.
func Reconcile(req *inrun.Request) (*inrun.Outcome, error) {
	spec, _ := inrun.AsObject(req.Spec())
	size, _ := inrun.AsInt(spec["size"])
	out := inrun.NewOutcome().AddResource(inrun.Object{
		"apiVersion": "v1",
		"kind":       "ConfigMap",
		"metadata":   inrun.Object{"name": req.Name() + "-report"},
		"data":       inrun.Object{"size": fmt.Sprint(size)},
	})
	if size >= 1 {
		out.SetCondition("Sized", inrun.True, "SizeSet", fmt.Sprintf("size is %d", size))
	} else {
		out.SetCondition("Sized", inrun.False, "NoSize", "spec.size is not set")
	}
	out.AddEvent("Resized", fmt.Sprintf("size %d", size))
	if spec["spoof"] == true {
		// Ready is the host's: it drops this one.
		out.SetCondition("Ready", inrun.True, "Spoofed", "not mine")
	}
	return out, nil
}
