package webapp

import (
	"reflect"
	"testing"

	"inrun.dev/sdk/inrun"
)

func webapp(t *testing.T, spec string) *inrun.Request {
	t.Helper()
	v, err := inrun.ParseJSON(spec)
	if err != nil {
		t.Fatal(err)
	}
	return inrun.RequestFor(inrun.Object{
		"apiVersion": "demo.inrun.dev/v1alpha1",
		"kind":       "WebApp",
		"metadata":   inrun.Object{"name": "shop", "namespace": "prod"},
		"spec":       v,
	}, nil)
}

func ok(t *testing.T, req *inrun.Request) *inrun.Outcome {
	t.Helper()
	out, err := Reconcile(req)
	if err != nil {
		t.Fatalf("reconcile failed: %v", err)
	}
	return out
}

func at(t *testing.T, v any, pointer string) any {
	t.Helper()
	got, found := inrun.Pointer(v, pointer)
	if !found {
		t.Fatalf("%s: missing", pointer)
	}
	return got
}

func TestAWebAppBecomesADeploymentAndAServiceWithDefaults(t *testing.T) {
	out := ok(t, webapp(t, `{"image": "nginx:1.27"}`))
	if len(out.Resources) != 2 {
		t.Fatalf("resources: %v", out.Resources)
	}
	deploy, svc := out.Resources[0], out.Resources[1]
	for pointer, want := range map[string]any{
		"/kind":               "Deployment",
		"/metadata/namespace": "prod",
		"/spec/replicas":      uint32(1),
		"/spec/selector/matchLabels/app.kubernetes.io~1name":     "shop",
		"/spec/template/spec/containers/0/image":                 "nginx:1.27",
		"/spec/template/spec/containers/0/ports/0/containerPort": uint16(8080),
		"/spec/template/metadata/labels/app.kubernetes.io~1name": "shop",
	} {
		if got := at(t, deploy, pointer); got != want {
			t.Errorf("deployment %s: %v (%T)", pointer, got, got)
		}
	}
	if _, found := inrun.Pointer(deploy, "/spec/template/spec/containers/0/env"); found {
		t.Error("env without spec.env")
	}
	if got := at(t, svc, "/spec/ports/0/targetPort"); got != uint16(8080) {
		t.Errorf("service targetPort: %v", got)
	}
}

func TestTheStatusReportsImageReplicasAndURL(t *testing.T) {
	out := ok(t, webapp(t, `{"image": "nginx:1.27", "replicas": 3, "port": 9000}`))
	want := inrun.Object{"image": "nginx:1.27", "replicas": uint32(3), "url": "http://shop.prod.svc:80"}
	if !reflect.DeepEqual(out.Status, want) {
		t.Errorf("status: %v", out.Status)
	}
	if out.Labels[TierLabel] != "web" {
		t.Errorf("labels: %v", out.Labels)
	}
}

func TestEnvBecomesContainerEnvironmentVariablesSortedByName(t *testing.T) {
	out := ok(t, webapp(t, `{"image": "x", "env": {"B": "2", "A": "1"}}`))
	got := at(t, out.Resources[0], "/spec/template/spec/containers/0/env")
	want := inrun.Array{inrun.Object{"name": "A", "value": "1"}, inrun.Object{"name": "B", "value": "2"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("env: %v", got)
	}
}

func TestAMissingImageOrAFieldOfTheWrongTypeIsAnError(t *testing.T) {
	for spec, want := range map[string]string{
		`{"replicas": 2}`:                    "spec.image is required",
		`{"image": ""}`:                      "spec.image is required",
		`null`:                               "spec.image is required",
		`{"image": "x", "replicas": "many"}`: `spec: invalid type: string "many", expected u32`,
	} {
		if _, err := Reconcile(webapp(t, spec)); err == nil || err.Error() != want {
			t.Errorf("%s: %v", spec, err)
		}
	}
}

func TestAFinalizingWebAppGetsAnEmptyOutcome(t *testing.T) {
	req := webapp(t, `{"image": "nginx"}`)
	req.Finalizing = true
	if out := ok(t, req); !out.IsEmpty() {
		t.Errorf("%+v", out)
	}
}
