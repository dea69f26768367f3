package inrun

import (
	"encoding/json"
	"testing"
)

type webAppSpec struct {
	Image    *string           `json:"image"`
	Replicas *uint32           `json:"replicas"`
	Port     *uint16           `json:"port"`
	Env      map[string]string `json:"env"`
}

func parse(t *testing.T, text string) any {
	t.Helper()
	v, err := ParseJSON(text)
	if err != nil {
		t.Fatalf("parse %s: %v", text, err)
	}
	return v
}

// The messages are serde's, as the Rust SDK gives them (host/tests/lang_go.rs compares
// them with the Rust plugin's through the host).
func TestDecodeGivesSerdesMessages(t *testing.T) {
	cases := []struct{ spec, want string }{
		{`{"image": "x", "replicas": "many"}`, `spec: invalid type: string "many", expected u32`},
		{`{"image": "x", "port": 70000}`, "spec: invalid value: integer `70000`, expected u16"},
		{`{"image": "x", "env": {"A": 1}}`, "spec: invalid type: integer `1`, expected a string"},
		{`{"image": 7}`, "spec: invalid type: integer `7`, expected a string"},
		{`{"image": "x", "env": {"A": null}}`, "spec: invalid type: null, expected a string"},
		{`{"image": "x", "replicas": 3.5}`, "spec: invalid type: floating point `3.5`, expected u32"},
		{`{"image": "x", "replicas": 1e3}`, "spec: invalid type: floating point `1000.0`, expected u32"},
		{`{"image": "x", "replicas": -1}`, "spec: invalid value: integer `-1`, expected u32"},
		{`{"image": "x", "replicas": true}`, "spec: invalid type: boolean `true`, expected u32"},
		{`{"image": "x", "env": [1]}`, "spec: invalid type: sequence, expected a map"},
		{`{"image": "x", "replicas": {}}`, "spec: invalid type: map, expected u32"},
		{`"text"`, `spec: invalid type: string "text", expected struct webAppSpec`},
		{`[1]`, "spec: invalid type: integer `1`, expected a string"},
		{`["x", 1, 2, {}, 5]`, "spec: invalid length 5, expected fewer elements in array"},
		// Keys are visited in sorted order, as serde_json's map: image before replicas.
		{`{"replicas": "many", "image": 7}`, "spec: invalid type: integer `7`, expected a string"},
	}
	for _, c := range cases {
		var s webAppSpec
		err := Decode(parse(t, c.spec), &s, "spec")
		if err == nil || err.Error() != c.want {
			t.Errorf("%s: got %v, want %s", c.spec, err, c.want)
		}
	}
}

func TestDecodeFillsStructsMapsSlicesAndPointers(t *testing.T) {
	type port struct {
		Name string `json:"name"`
		Port int64
	}
	type embedded struct {
		Extra bool `json:"extra"`
	}
	var got struct {
		embedded
		Name    string         `json:"name"`
		Ports   []port         `json:"ports"`
		Labels  map[string]any `json:"labels"`
		Ratio   float64        `json:"ratio"`
		Big     json.Number    `json:"big"`
		Raw     json.RawMessage
		Missing *string `json:"missing"`
		Skipped string  `json:"-"`
	}
	got.Skipped = "kept"
	err := Decode(parse(t, `{"name": "web", "ports": [{"name": "http", "port": 80}],
		"labels": {"a": "b", "n": 1}, "ratio": 0.25, "big": 12345678901234567890,
		"Raw": {"z": [1]}, "extra": true, "unknown": 1, "-": "no"}`), &got, "x")
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "web" || len(got.Ports) != 1 || got.Ports[0].Port != 80 || got.Ports[0].Name != "http" {
		t.Errorf("fields: %+v", got)
	}
	if got.Labels["a"] != "b" || got.Labels["n"] != json.Number("1") {
		t.Errorf("labels: %v", got.Labels)
	}
	if got.Ratio != 0.25 || got.Big != "12345678901234567890" || string(got.Raw) != `{"z":[1]}` {
		t.Errorf("numbers: %+v", got)
	}
	if !got.Extra || got.Missing != nil || got.Skipped != "kept" {
		t.Errorf("embedded, missing or skipped: %+v", got)
	}
}

func TestAStructReadsFromASequenceFieldByField(t *testing.T) {
	var s webAppSpec
	if err := Decode(parse(t, `["x", 2]`), &s, "spec"); err != nil {
		t.Fatal(err)
	}
	if *s.Image != "x" || *s.Replicas != 2 || s.Port != nil {
		t.Fatalf("%+v", s)
	}
}

func TestDecodeNeedsAPointer(t *testing.T) {
	var s string
	if err := Decode("x", s, "v"); err == nil {
		t.Fatal("a non-pointer was accepted")
	}
}
