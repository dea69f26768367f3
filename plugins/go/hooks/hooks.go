// Package hooks is the example hooks plugin in Go, the same functions as the Rust plugin in
// plugins/labels-hooks:
//
//   - add-labels: label every resource, and the CR, demo.inrun.dev/team: <args.team>
//     ("platform" when the Blueprint passes no team argument).
//   - annotate: annotate every resource demo.inrun.dev/rendered-by: hooks.
//   - add-sidecar: add a log-shipper container (busybox:1.36) to every Deployment's pod
//     template, once.
//
// Hooks edit full objects only: a resource in the intent form ({"type", "fields"}) has no
// metadata yet and is passed through untouched.
package hooks

import "inrun.dev/sdk/inrun"

// The label, annotation and sidecar the hooks set.
const (
	TeamLabel    = "demo.inrun.dev/team"
	DefaultTeam  = "platform"
	RenderedBy   = "demo.inrun.dev/rendered-by"
	SidecarName  = "log-shipper"
	SidecarImage = "busybox:1.36"
)

// Functions are the hook functions, in the order functions() lists them.
var Functions = []inrun.Hook{
	{Name: "add-labels", Func: AddLabels},
	{Name: "annotate", Func: Annotate},
	{Name: "add-sidecar", Func: AddSidecar},
}

func init() { inrun.ExportHooks(Functions...) }

// AddLabels labels every resource and the CR with the team from args.team.
func AddLabels(req *inrun.Request, current *inrun.Outcome) (*inrun.Outcome, error) {
	team := DefaultTeam
	if _, err := req.OptionalArg("team", &team); err != nil {
		return nil, err
	}
	for _, r := range fullObjects(current) {
		inrun.Field(inrun.Field(r, "metadata"), "labels")[TeamLabel] = team
	}
	return current.SetLabel(TeamLabel, team), nil
}

// Annotate marks every resource as rendered by these hooks.
func Annotate(_ *inrun.Request, current *inrun.Outcome) (*inrun.Outcome, error) {
	for _, r := range fullObjects(current) {
		inrun.Field(inrun.Field(r, "metadata"), "annotations")[RenderedBy] = "hooks"
	}
	return current, nil
}

// AddSidecar adds the log-shipper container to every Deployment that does not have it yet.
func AddSidecar(_ *inrun.Request, current *inrun.Outcome) (*inrun.Outcome, error) {
	for _, r := range fullObjects(current) {
		if r["kind"] != "Deployment" {
			continue
		}
		spec, _ := inrun.AsObject(r["spec"])
		found, _ := inrun.Pointer(spec, "/template/spec/containers")
		containers, ok := inrun.AsArray(found)
		if !ok {
			continue
		}
		present := false
		for _, c := range containers {
			if c, ok := inrun.AsObject(c); ok && c["name"] == SidecarName {
				present = true
			}
		}
		if !present {
			template, _ := inrun.Pointer(spec, "/template/spec")
			template.(inrun.Object)["containers"] = append(containers,
				inrun.Object{"name": SidecarName, "image": SidecarImage})
		}
	}
	return current, nil
}

// fullObjects are the resources that are full Kubernetes objects (they have a kind), not
// intents.
func fullObjects(o *inrun.Outcome) []inrun.Object {
	var out []inrun.Object
	for _, r := range o.Resources {
		if obj, ok := inrun.AsObject(r); ok {
			if _, ok := obj["kind"]; ok {
				out = append(out, obj)
			}
		}
	}
	return out
}
