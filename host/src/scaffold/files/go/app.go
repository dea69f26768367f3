// Package app is the @KIND@ reconciler: a ConfigMap with spec.message, and the message in
// status. It imports no bindings, so `go test` runs it natively; build.sh links it into a
// component (the init function below makes Reconcile its reconcile export).
package app

import "inrun.dev/sdk/inrun"

func init() { inrun.ExportReconciler(Reconcile) }

// Spec is the fields of a @KIND@'s spec.
type Spec struct {
	// Message goes into the ConfigMap and the status ("hello" when not set).
	Message *string `json:"message"`
}

// Reconcile declares what a @KIND@ CR should become.
func Reconcile(req *inrun.Request) (*inrun.Outcome, error) {
	if req.Finalizing {
		return inrun.NewOutcome(), nil // the host deletes the children
	}
	var spec Spec
	if req.Spec() != nil {
		if err := req.DecodeSpec(&spec); err != nil {
			return nil, err // fails this reconcile with the message
		}
	}
	message := "hello"
	if spec.Message != nil {
		message = *spec.Message
	}
	metadata := inrun.Object{"name": req.Name()}
	if ns := req.Namespace(); ns != "" {
		metadata["namespace"] = ns
	}
	return inrun.NewOutcome().
		AddResource(inrun.Object{
			"apiVersion": "v1",
			"kind":       "ConfigMap",
			"metadata":   metadata,
			"data":       inrun.Object{"message": message},
		}).
		SetStatus("message", message), nil
}
