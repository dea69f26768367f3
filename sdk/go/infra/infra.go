// Package infra writes Inrun infrastructure packages in Go: the package world of the
// 0.2.0 contract (wit/0.2.0), for a custom resource that stands for something outside
// Kubernetes (a database, a bucket, a DNS zone).
//
// The host calls Validate, Identity and Observe, and Converge or Delete only when what
// it observes calls for it. Every call receives the same Options; each must be
// idempotent. A package reaches its backend with inrun.Fetch (hosts the Blueprint grants)
// and the credentials Credential reads (keys of Secrets the Blueprint grants, in the CR's
// namespace); it sees no environment. A returned error fails that step: its message
// reaches only the host's log, and the CR shows a generic reason.
//
//	type bucket struct{}
//
//	func (bucket) Validate(o *infra.Options) []string { return nil }
//	func (bucket) Identity(o *infra.Options) (infra.Identity, error) { ... }
//	func (bucket) Observe(o *infra.Options) (infra.Observation, error) { ... }
//	func (bucket) Converge(o *infra.Options) (infra.Workflow, error) { return infra.Completed(""), nil }
//	func (bucket) Delete(o *infra.Options) (infra.Workflow, error) { return infra.Completed(""), nil }
//
//	func init() { infra.Export(bucket{}) }
package infra

import (
	"errors"
	"fmt"

	"inrun.dev/sdk/inrun"
)

// Event says what woke the CR.
type Event string

// The events of the contract.
const (
	// Changed: the CR is new, or its desired state (its generation) changed.
	Changed Event = "changed"
	// Interval: spec.reconcileInterval passed since the last check.
	Interval Event = "interval"
	// Requested: the inrun.dev/reconcile-request annotation changed.
	Requested Event = "requested"
	// Retry: a retry after a failure, or a re-observation of infrastructure not ready yet.
	Retry Event = "retry"
	// Deleting: the CR is being deleted with deletionPolicy: Delete.
	Deleting Event = "deleting"
)

// Events in the contract's order (the enum's cases).
var Events = []Event{Changed, Interval, Requested, Retry, Deleting}

// Descriptor is the custom resource type the package serves, as the Blueprint declares it.
type Descriptor struct {
	Group   string
	Version string
	Plural  string
	Kind    string
}

// Options is what every call receives.
type Options struct {
	// Config is spec.config of the CR ({} when absent).
	Config inrun.Object
	// Profile is spec.config.profile when set, else "<namespace>--<name>" ("<name>" for a
	// cluster-scoped CR).
	Profile string
	// State is spec.state (default "running").
	State string
	// Event is what woke the CR.
	Event Event
	// Resource is the CR's type.
	Resource Descriptor
	// Namespace is the CR's namespace; "" for a cluster-scoped CR.
	Namespace string
	// Name is the CR's name.
	Name string
}

// DecodeConfig fills the value into points to from Config, with the Rust SDK's messages
// (`config: invalid type: ...`); see inrun.Decode.
func (o *Options) DecodeConfig(into any) error {
	return inrun.Decode(map[string]any(o.Config), into, "config")
}

// Identity says who owns the infrastructure and which thing it is.
type Identity struct {
	// Boundary is the backend boundary, e.g. an account or region.
	Boundary string
	// Profile is the credentials profile the package acts with.
	Profile string
	// State identifies the thing within the boundary; a nil entry is an absent one. The
	// host hashes it and refuses a later identity that hashes differently, so an edit
	// never silently abandons what was created.
	State []*string
}

// AddState appends an entry to State ("" is an entry like any other; use AddAbsent for
// an absent one).
func (id *Identity) AddState(entry string) *Identity {
	id.State = append(id.State, &entry)
	return id
}

// AddAbsent appends an absent entry to State.
func (id *Identity) AddAbsent() *Identity {
	id.State = append(id.State, nil)
	return id
}

// Observation is what Observe saw.
type Observation struct {
	// Exists: the thing exists.
	Exists bool
	// Matches: it is as the options describe.
	Matches bool
	// Ready: it is usable.
	Ready bool
}

// Progress says how a Converge or Delete went.
type Progress uint8

// The three progresses, in the contract's order.
const (
	// ProgressCompleted: done; the host observes again.
	ProgressCompleted Progress = iota
	// ProgressPending: started and still running on the backend; the host observes again
	// later without calling again while what it observes does not call for it.
	ProgressPending
	// ProgressFailed: did not work; retried with backoff.
	ProgressFailed
)

// Workflow is a Converge or Delete answer; Detail reaches only the host's log.
type Workflow struct {
	Progress Progress
	Detail   string
}

// Completed is a finished workflow.
func Completed(detail string) Workflow { return Workflow{ProgressCompleted, detail} }

// Pending is a workflow still running on the backend.
func Pending(detail string) Workflow { return Workflow{ProgressPending, detail} }

// Failed is a workflow that did not work (retried with backoff).
func Failed(detail string) Workflow { return Workflow{ProgressFailed, detail} }

// Package is an infrastructure package: what the host drives.
type Package interface {
	// Validate lists problems with the options (none when they are valid). Shown only in
	// the host's log; the CR gets the generic reason ValidationFailed.
	Validate(o *Options) []string
	// Identity says which thing the CR stands for.
	Identity(o *Options) (Identity, error)
	// Observe says what the thing looks like now.
	Observe(o *Options) (Observation, error)
	// Converge makes the thing as the options describe.
	Converge(o *Options) (Workflow, error)
	// Delete deletes the thing.
	Delete(o *Options) (Workflow, error)
}

var exported Package

// Export makes p the component's package (world package). Call it from an init function
// of the plugin's package.
func Export(p Package) {
	exported = p
}

// Credential is the value of key in the Secret name of the CR's namespace, when the
// Blueprint grants it (package.capabilities.credentials). The error says why not (never
// the value). Keep the value out of what the package returns: errors and details reach
// the host's log.
func Credential(name, key string) (string, error) {
	get := inrun.CurrentHost().Credential
	if get == nil {
		return "", inrun.ErrNoHost
	}
	return get(name, key)
}

// WireOptions is the WIT record options, with the config as JSON text and the event as
// the enum's case index. The SDK's glue fills it from the generated bindings.
type WireOptions struct {
	Config    string
	Profile   string
	State     string
	Event     uint8
	Resource  Descriptor
	Namespace *string
	Name      string
}

// ParseOptions parses the options the host sent.
func ParseOptions(w WireOptions) (*Options, error) {
	v, err := inrun.ParseJSON(w.Config)
	if err != nil {
		return nil, fmt.Errorf("options.config is not valid JSON: %v", err)
	}
	config, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("options.config is not a JSON object")
	}
	if int(w.Event) >= len(Events) {
		return nil, fmt.Errorf("options.event: unknown case %d", w.Event)
	}
	o := &Options{
		Config:   config,
		Profile:  w.Profile,
		State:    w.State,
		Event:    Events[w.Event],
		Resource: w.Resource,
		Name:     w.Name,
	}
	if w.Namespace != nil {
		o.Namespace = *w.Namespace
	}
	return o, nil
}

func current() (Package, error) {
	if exported == nil {
		return nil, errors.New("no package: call infra.Export from the plugin's init")
	}
	return exported, nil
}

// CallValidate is the validate export: options that do not parse are one problem.
func CallValidate(w WireOptions) []string {
	p, err := current()
	if err != nil {
		return []string{err.Error()}
	}
	o, err := ParseOptions(w)
	if err != nil {
		return []string{err.Error()}
	}
	return append([]string{}, p.Validate(o)...)
}

// CallIdentity is the identity export.
func CallIdentity(w WireOptions) (Identity, error) {
	p, o, err := prepare(w)
	if err != nil {
		return Identity{}, err
	}
	return p.Identity(o)
}

// CallObserve is the observe export.
func CallObserve(w WireOptions) (Observation, error) {
	p, o, err := prepare(w)
	if err != nil {
		return Observation{}, err
	}
	return p.Observe(o)
}

// CallConverge is the converge export.
func CallConverge(w WireOptions) (Workflow, error) {
	p, o, err := prepare(w)
	if err != nil {
		return Workflow{}, err
	}
	return checked(p.Converge(o))
}

// CallDelete is the delete export.
func CallDelete(w WireOptions) (Workflow, error) {
	p, o, err := prepare(w)
	if err != nil {
		return Workflow{}, err
	}
	return checked(p.Delete(o))
}

func prepare(w WireOptions) (Package, *Options, error) {
	p, err := current()
	if err != nil {
		return nil, nil, err
	}
	o, err := ParseOptions(w)
	return p, o, err
}

func checked(w Workflow, err error) (Workflow, error) {
	if err == nil && w.Progress > ProgressFailed {
		return Workflow{}, fmt.Errorf("unknown workflow progress %d", w.Progress)
	}
	return w, err
}
