package app

import (
	"testing"

	"inrun.dev/sdk/inrun"
)

func request(spec inrun.Object) *inrun.Request {
	return inrun.RequestFor(inrun.Object{
		"apiVersion": "example.inrun.dev/v1alpha1",
		"kind":       "@KIND@",
		"metadata":   inrun.Object{"name": "sample", "namespace": "default"},
		"spec":       spec,
	}, nil)
}

func TestTheMessageGoesIntoAConfigMapAndTheStatus(t *testing.T) {
	out, err := Reconcile(request(inrun.Object{"message": "hi"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Resources) != 1 {
		t.Fatalf("resources: %v", out.Resources)
	}
	if got, _ := inrun.Pointer(out.Resources[0], "/data/message"); got != "hi" {
		t.Errorf("ConfigMap data: %v", out.Resources[0])
	}
	if out.Status["message"] != "hi" {
		t.Errorf("status: %v", out.Status)
	}
}

func TestAMessageThatIsNotAStringIsAnError(t *testing.T) {
	_, err := Reconcile(request(inrun.Object{"message": 7}))
	want := "spec: invalid type: integer `7`, expected a string"
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %s", err, want)
	}
}
