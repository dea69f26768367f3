// Package webapp is the example constructor in Go: a WebApp CR becomes a Deployment and a
// Service, the same outputs as the Rust plugin in plugins/webapp.
//
// The logic is a plain function, Reconcile, tested natively with `go test`; the build
// (plugins/go/build.sh) links it with the SDK's glue into a component of world reconciler.
package webapp

import (
	"errors"
	"fmt"
	"sort"

	"inrun.dev/sdk/inrun"
)

// NameLabel is the label every object of one WebApp carries, and the selector that finds
// its pods.
const NameLabel = "app.kubernetes.io/name"

// TierLabel is the label the reconciler sets on the WebApp itself.
const TierLabel = "demo.inrun.dev/tier"

func init() { inrun.ExportReconciler(Reconcile) }

// WebAppSpec holds the fields of a WebApp's spec, with the Rust plugin's types (and so its
// messages for a value that does not fit).
type WebAppSpec struct {
	// Image is required (checked by Reconcile for a clear message).
	Image *string `json:"image"`
	// Replicas defaults to 1.
	Replicas *uint32 `json:"replicas"`
	// Port is where the container listens (default 8080); the Service forwards 80 to it.
	Port *uint16 `json:"port"`
	// Env are environment variables for the container.
	Env map[string]string `json:"env"`
}

// Reconcile declares the Deployment and Service a WebApp CR should have, its status and
// its tier label. A finalizing CR gets an empty outcome: the host deletes the children.
func Reconcile(req *inrun.Request) (*inrun.Outcome, error) {
	if req.Finalizing {
		return inrun.NewOutcome(), nil
	}
	if req.Spec() == nil {
		return nil, errors.New("spec.image is required")
	}
	var s WebAppSpec
	if err := req.DecodeSpec(&s); err != nil {
		return nil, err
	}
	if s.Image == nil || *s.Image == "" {
		return nil, errors.New("spec.image is required")
	}
	replicas, port := uint32(1), uint16(8080)
	if s.Replicas != nil {
		replicas = *s.Replicas
	}
	if s.Port != nil {
		port = *s.Port
	}
	name := req.Name()
	namespace := req.Namespace()
	if namespace == "" {
		namespace = "default"
	}
	return inrun.NewOutcome().
		AddResource(deployment(name, namespace, *s.Image, replicas, port, s.Env)).
		AddResource(service(name, namespace, port)).
		SetStatus("image", *s.Image).
		SetStatus("replicas", replicas).
		SetStatus("url", fmt.Sprintf("http://%s.%s.svc:80", name, namespace)).
		SetLabel(TierLabel, "web"), nil
}

func labels(name string) inrun.Object {
	return inrun.Object{NameLabel: name}
}

func metadata(name, namespace string) inrun.Object {
	return inrun.Object{"name": name, "namespace": namespace, "labels": labels(name)}
}

func deployment(name, namespace, image string, replicas uint32, port uint16, env map[string]string) inrun.Object {
	container := inrun.Object{
		"name":  "web",
		"image": image,
		"ports": inrun.Array{inrun.Object{"name": "http", "containerPort": port, "protocol": "TCP"}},
	}
	if len(env) > 0 {
		keys := make([]string, 0, len(env))
		for k := range env {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		vars := make(inrun.Array, 0, len(keys))
		for _, k := range keys {
			vars = append(vars, inrun.Object{"name": k, "value": env[k]})
		}
		container["env"] = vars
	}
	return inrun.Object{
		"apiVersion": "apps/v1",
		"kind":       "Deployment",
		"metadata":   metadata(name, namespace),
		"spec": inrun.Object{
			"replicas": replicas,
			"selector": inrun.Object{"matchLabels": labels(name)},
			"template": inrun.Object{
				"metadata": inrun.Object{"labels": labels(name)},
				"spec":     inrun.Object{"containers": inrun.Array{container}},
			},
		},
	}
}

func service(name, namespace string, port uint16) inrun.Object {
	return inrun.Object{
		"apiVersion": "v1",
		"kind":       "Service",
		"metadata":   metadata(name, namespace),
		"spec": inrun.Object{
			"selector": labels(name),
			"ports": inrun.Array{inrun.Object{
				"name": "http", "port": 80, "targetPort": port, "protocol": "TCP",
			}},
		},
	}
}
