package hooks

import (
	"reflect"
	"strings"
	"testing"

	"inrun.dev/sdk/inrun"
)

func request(args inrun.Object) *inrun.Request {
	return inrun.RequestFor(inrun.Object{
		"apiVersion": "demo.inrun.dev/v1alpha1", "kind": "WebApp",
		"metadata": inrun.Object{"name": "shop", "namespace": "prod"},
	}, args)
}

func rendered() *inrun.Outcome {
	return inrun.NewOutcome().
		AddResource(inrun.Object{
			"apiVersion": "apps/v1", "kind": "Deployment",
			"metadata": inrun.Object{"name": "shop", "labels": inrun.Object{"app": "shop"}},
			"spec": inrun.Object{"template": inrun.Object{"spec": inrun.Object{
				"containers": inrun.Array{inrun.Object{"name": "web", "image": "nginx"}},
			}}},
		}).
		AddResource(inrun.Object{"apiVersion": "v1", "kind": "Service", "metadata": inrun.Object{"name": "shop"}}).
		AddIntent("deployment", inrun.Object{"image": "nginx"})
}

func call(t *testing.T, fn inrun.HookFunc, args inrun.Object) *inrun.Outcome {
	t.Helper()
	out, err := fn(request(args), rendered())
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestAddLabelsLabelsEveryObjectAndTheCRWithTheTeamArgument(t *testing.T) {
	out := call(t, AddLabels, inrun.Object{"team": "payments"})
	if got, _ := inrun.Pointer(out.Resources[0], "/metadata/labels"); !reflect.DeepEqual(got, inrun.Object{"app": "shop", TeamLabel: "payments"}) {
		t.Errorf("deployment: %v", got)
	}
	if got, _ := inrun.Pointer(out.Resources[1], "/metadata/labels"); !reflect.DeepEqual(got, inrun.Object{TeamLabel: "payments"}) {
		t.Errorf("service: %v", got)
	}
	if out.Labels[TeamLabel] != "payments" {
		t.Errorf("CR: %v", out.Labels)
	}
}

func TestAddLabelsDefaultsTheTeamAndRejectsOneThatIsNotAString(t *testing.T) {
	if out := call(t, AddLabels, inrun.Object{"team": nil}); out.Labels[TeamLabel] != DefaultTeam {
		t.Errorf("default: %v", out.Labels)
	}
	_, err := AddLabels(request(inrun.Object{"team": 7}), rendered())
	if err == nil || !strings.HasPrefix(err.Error(), "args.team: invalid type") {
		t.Errorf("%v", err)
	}
}

func TestHooksLeaveIntentsUntouchedAndAnnotateMarksEveryObject(t *testing.T) {
	for _, h := range Functions {
		out := call(t, h.Func, inrun.Object{})
		if !reflect.DeepEqual(out.Resources[2], rendered().Resources[2]) {
			t.Errorf("%s changed the intent: %v", h.Name, out.Resources[2])
		}
	}
	out := call(t, Annotate, nil)
	for _, r := range out.Resources[:2] {
		if got, _ := inrun.Pointer(r, "/metadata/annotations/demo.inrun.dev~1rendered-by"); got != "hooks" {
			t.Errorf("not annotated: %v", r)
		}
	}
	if len(out.Annotations) != 0 {
		t.Error("the CR itself is annotated")
	}
}

func TestAddSidecarAddsTheLogShipperToDeploymentsOnlyOnce(t *testing.T) {
	once := call(t, AddSidecar, nil)
	twice, _ := AddSidecar(request(nil), once)
	got, _ := inrun.Pointer(twice.Resources[0], "/spec/template/spec/containers")
	want := inrun.Array{
		inrun.Object{"name": "web", "image": "nginx"},
		inrun.Object{"name": SidecarName, "image": SidecarImage},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("containers: %v", got)
	}
	if !reflect.DeepEqual(twice.Resources[1], rendered().Resources[1]) {
		t.Error("a Service got a sidecar")
	}
}
