package inrun

import "testing"

func TestPointerFieldAndClone(t *testing.T) {
	v := mustParse(`{"a/b": {"list": [{"name": "x"}]}, "m~n": 1}`)
	if got, ok := Pointer(v, "/a~1b/list/0/name"); !ok || got != "x" {
		t.Fatalf("pointer: %v %v", got, ok)
	}
	for _, missing := range []string{"/a~1b/list/1", "/a~1b/list/01", "/nope", "x"} {
		if _, ok := Pointer(v, missing); ok {
			t.Errorf("%s found", missing)
		}
	}
	if got, ok := Pointer(v, "/m~0n"); !ok || got != mustParse("1") {
		t.Fatalf("~0: %v", got)
	}
	obj := Object{"metadata": "not a map"}
	Field(Field(obj, "metadata"), "labels")["team"] = "x"
	if got, _ := Pointer(obj, "/metadata/labels/team"); got != "x" {
		t.Fatalf("field: %v", obj)
	}
	copied := Clone(obj).(Object)
	Field(copied, "metadata")["name"] = "y"
	if _, ok := Pointer(obj, "/metadata/name"); ok {
		t.Fatal("clone shares maps")
	}
	if n, ok := AsInt(mustParse("12345678901234567890")); ok {
		t.Fatalf("out of int64 range read as %d", n)
	}
	if _, err := ParseJSON(`{} {}`); err == nil {
		t.Fatal("two values parsed as one")
	}
}
