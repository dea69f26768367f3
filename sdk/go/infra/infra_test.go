package infra

import (
	"errors"
	"reflect"
	"testing"

	"inrun.dev/sdk/inrun"
)

type fake struct{ progress Progress }

func (fake) Validate(o *Options) []string {
	var size int
	if err := o.DecodeConfig(&struct {
		Size *int `json:"size"`
	}{&size}); err != nil {
		return []string{err.Error()}
	}
	if size < 1 {
		return []string{"config.size must be at least 1"}
	}
	return nil
}

func (fake) Identity(o *Options) (Identity, error) {
	id := Identity{Boundary: "b", Profile: o.Profile}
	id.AddState(o.Profile).AddAbsent()
	return id, nil
}

func (fake) Observe(o *Options) (Observation, error) {
	if o.Event == Deleting {
		return Observation{}, errors.New("gone")
	}
	return Observation{Exists: true, Matches: o.Namespace == "ns", Ready: true}, nil
}

func (f fake) Converge(*Options) (Workflow, error) { return Workflow{Progress: f.progress}, nil }
func (fake) Delete(*Options) (Workflow, error)     { return Pending("later"), nil }

func wire(config string, event uint8) WireOptions {
	ns := "ns"
	return WireOptions{Config: config, Profile: "ns--x", State: "running", Event: event,
		Resource: Descriptor{"g", "v1", "things", "Thing"}, Namespace: &ns, Name: "x"}
}

func TestTheExportedPackageAnswersEachStep(t *testing.T) {
	Export(fake{})
	if got := CallValidate(wire(`{"size": 2}`, 0)); len(got) != 0 {
		t.Fatalf("valid: %v", got)
	}
	if got := CallValidate(wire(`{"size": "big"}`, 0)); !reflect.DeepEqual(got, []string{`config: invalid type: string "big", expected i64`}) {
		t.Fatalf("invalid: %v", got)
	}
	if got := CallValidate(wire(`[]`, 0)); !reflect.DeepEqual(got, []string{"options.config is not a JSON object"}) {
		t.Fatalf("not an object: %v", got)
	}
	id, err := CallIdentity(wire(`{}`, 0))
	if err != nil || id.Profile != "ns--x" || len(id.State) != 2 || *id.State[0] != "ns--x" || id.State[1] != nil {
		t.Fatalf("identity: %v %+v", err, id)
	}
	seen, err := CallObserve(wire(`{}`, 1))
	if err != nil || seen != (Observation{true, true, true}) {
		t.Fatalf("observe: %v %+v", err, seen)
	}
	if _, err := CallObserve(wire(`{}`, 4)); err == nil || err.Error() != "gone" {
		t.Fatalf("deleting: %v", err)
	}
	if _, err := CallObserve(wire(`{}`, 5)); err == nil {
		t.Fatal("an unknown event was accepted")
	}
	if w, err := CallDelete(wire(`{}`, 4)); err != nil || w != Pending("later") {
		t.Fatalf("delete: %v %+v", err, w)
	}
	Export(fake{progress: 7})
	if _, err := CallConverge(wire(`{}`, 0)); err == nil {
		t.Fatal("an unknown progress was accepted")
	}
}

func TestCredentialsComeFromTheHost(t *testing.T) {
	if _, err := Credential("s", "k"); !errors.Is(err, inrun.ErrNoHost) {
		t.Fatalf("natively: %v", err)
	}
	previous := inrun.SetHost(inrun.Host{Credential: func(name, key string) (string, error) {
		return name + "/" + key, nil
	}})
	defer inrun.SetHost(previous)
	if v, err := Credential("s", "k"); err != nil || v != "s/k" {
		t.Fatalf("%v %q", err, v)
	}
}
