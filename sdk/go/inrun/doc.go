// Package inrun writes Inrun reconcilers (the constructor kind) and hooks in Go, built with
// the standard Go toolchain (GOOS=wasip1, -buildmode=c-shared) into WebAssembly components
// of the inrun:reconciler contract that the stock host loads at run time.
//
// A reconciler is a function from a Request to an Outcome, exported from an init
// function of the plugin's package:
//
//	package hello
//
//	import "inrun.dev/sdk/inrun"
//
//	func init() { inrun.ExportReconciler(Reconcile) }
//
//	func Reconcile(req *inrun.Request) (*inrun.Outcome, error) {
//		if req.Finalizing {
//			return inrun.NewOutcome(), nil // the host deletes the children
//		}
//		var spec struct {
//			Greeting string `json:"greeting"`
//		}
//		if err := req.DecodeSpec(&spec); err != nil {
//			return nil, err
//		}
//		return inrun.NewOutcome().
//			AddResource(inrun.Object{
//				"apiVersion": "v1", "kind": "ConfigMap",
//				"metadata": inrun.Object{"name": req.Name(), "namespace": req.Namespace()},
//				"data":     inrun.Object{"greeting": spec.Greeting},
//			}).
//			SetStatus("greeted", true), nil
//	}
//
// Hooks are named functions that adjust what a Blueprint's templates rendered:
// inrun.ExportHooks(inrun.Hook{Name: "add-labels", Func: addLabels}, ...).
//
// The plugin's package holds only logic and imports no bindings, so `go test` runs it
// natively. Kubernetes objects are light JSON values (Object, Array, json.Number, ...)
// or your own small structs; typed k8s.io/api structs work too but cost a much larger
// component and a slower fresh instance (see the SDK's README).
//
// The world's imports: Log (the host's log), GetObject and ListObjects (cluster reads,
// capabilities.cluster.read), Fetch (outbound HTTP, capabilities.http). Natively they
// fail with ErrNoHost unless a test sets stand-ins with SetHost.
//
// A returned error fails the call with its message; a panic traps the component, which
// fails only that call (the next one gets a fresh instance).
package inrun
