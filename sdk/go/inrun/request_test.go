package inrun

import (
	"reflect"
	"strings"
	"testing"
)

func webapp(spec any, args Object) *Request {
	return RequestFor(Object{
		"apiVersion": "demo.inrun.dev/v1alpha1",
		"kind":       "WebApp",
		"metadata":   Object{"name": "shop", "namespace": "prod"},
		"spec":       spec,
	}, args)
}

func TestNameAndNamespaceComeFromMetadataElseFromTheKey(t *testing.T) {
	req := webapp(nil, nil)
	if req.Key != "prod/shop" || req.Name() != "shop" || req.Namespace() != "prod" {
		t.Fatalf("%q %q %q", req.Key, req.Name(), req.Namespace())
	}
	req.Object = Object{}
	if req.Name() != "shop" || req.Namespace() != "prod" {
		t.Fatalf("from the key: %q %q", req.Name(), req.Namespace())
	}
	req.Key = "cluster-thing"
	if req.Name() != "cluster-thing" || req.Namespace() != "" {
		t.Fatalf("cluster-scoped: %q %q", req.Name(), req.Namespace())
	}
}

func TestArgsAreRequiredOptionalOrOfTheWrongType(t *testing.T) {
	req := webapp(nil, Object{"team": "payments", "size": mustParse("3"), "nothing": nil})
	var team string
	if err := req.Arg("team", &team); err != nil || team != "payments" {
		t.Fatalf("team: %v %q", err, team)
	}
	var size uint8
	if err := req.Arg("size", &size); err != nil || size != 3 {
		t.Fatalf("size: %v %d", err, size)
	}
	if err := req.Arg("nothing", &team); err == nil || err.Error() != "args.nothing is required" {
		t.Fatalf("null: %v", err)
	}
	present, err := req.OptionalArg("missing", &team)
	if present || err != nil || team != "payments" {
		t.Fatalf("missing: %v %v %q", present, err, team)
	}
	if err := req.Arg("size", &team); err == nil || err.Error() != "args.size: invalid type: integer `3`, expected a string" {
		t.Fatalf("wrong type: %v", err)
	}
}

func mustParse(text string) any {
	v, err := ParseJSON(text)
	if err != nil {
		panic(err)
	}
	return v
}

func TestARequestRoundTripsThroughTheWireRecord(t *testing.T) {
	req := webapp(Object{"image": "nginx"}, Object{"team": "payments"})
	req.Children = Object{"Service": Object{"shop": Object{}}}
	req.Target = "main"
	req.Finalizing = true
	w, err := req.Wire()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseRequest(w)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, req) {
		t.Fatalf("round trip:\n%#v\n%#v", back, req)
	}
}

func TestAWireRequestWithBadJSONIsAnErrorNamingTheField(t *testing.T) {
	_, err := ParseRequest(WireRequest{Object: "{not json", Args: "{}"})
	if err == nil || !strings.HasPrefix(err.Error(), "request.object is not valid JSON") {
		t.Fatalf("object: %v", err)
	}
	children := "["
	_, err = ParseRequest(WireRequest{Object: "{}", Args: "{}", Children: &children})
	if err == nil || !strings.HasPrefix(err.Error(), "request.children is not valid JSON") {
		t.Fatalf("children: %v", err)
	}
	_, err = ParseRequest(WireRequest{Object: `"not an object"`, Args: "{}"})
	if err == nil || err.Error() != "request.object is not a JSON object" {
		t.Fatalf("not an object: %v", err)
	}
}
