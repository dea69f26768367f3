package inrun

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"time"
)

// ConditionStatus is a condition's status, as Kubernetes writes it.
type ConditionStatus string

// The three condition statuses.
const (
	True    ConditionStatus = "True"
	False   ConditionStatus = "False"
	Unknown ConditionStatus = "Unknown"
)

// Condition is one of the reconciler's conditions on the CR (status.conditions), merged
// by type over those already there. The host adds observedGeneration and
// lastTransitionTime. Ready and Reconciled are the host's: a condition of either type is
// dropped.
type Condition struct {
	// Type is CamelCase, e.g. "Degraded".
	Type string
	// Status is True, False or Unknown.
	Status ConditionStatus
	// Reason is CamelCase, e.g. "ReplicaDown".
	Reason string
	// Message is for people; long messages are truncated.
	Message string
}

// EventType says how an event is shown.
type EventType string

// The two event types.
const (
	Normal  EventType = "Normal"
	Warning EventType = "Warning"
)

// Event is an event to record on the CR (kubectl describe). The host rate-limits a CR's
// events and records an event identical to a recent one only once.
type Event struct {
	// Type is Normal or Warning.
	Type EventType
	// Reason is CamelCase, e.g. "BackupStarted".
	Reason string
	// Message is for people; long messages are truncated.
	Message string
}

// Outcome is what a reconciler declares the CR should become. The reconciler only
// declares; the host does every write. Its fields are public so a hook can edit the
// outcome it is given; the methods set them and return the outcome, so calls chain:
//
//	return inrun.NewOutcome().
//		AddResource(deployment).
//		SetStatus("replicas", 3).
//		SetLabel("demo.inrun.dev/tier", "web"), nil
type Outcome struct {
	// Resources are the objects to apply: full Kubernetes objects (usually Objects, or
	// any value that marshals to one), or the intent form {"type": ..., "fields": ...}.
	Resources []any
	// Status is merged into the CR's status after the Blueprint's emit.status (it wins);
	// nil sets nothing.
	Status Object
	// Labels are set on the CR; a key dropped from a later outcome is removed. Keys under
	// inrun.dev/ are the host's.
	Labels map[string]string
	// Annotations are set on the CR, with the same rules as Labels.
	Annotations map[string]string
	// Requeue asks to reconcile again after the host's default delay; while finalizing it
	// holds the deletion.
	Requeue bool
	// RequeueAfter asks to reconcile again after this long (milliseconds on the wire).
	RequeueAfter *time.Duration
	// CleanupAfter asks the host to delete the CR after this grace period (whole seconds
	// on the wire, rounded up); nil withdraws a pending one.
	CleanupAfter *time.Duration
	// Conditions to set on the CR: only a component built against the 0.2.0 contract
	// carries them (a 0.1.0 one fails the call when any are set).
	Conditions []Condition
	// Events to record on the CR: 0.2.0 only, as Conditions.
	Events []Event
}

// NewOutcome returns an empty outcome: nothing to apply, nothing to set.
func NewOutcome() *Outcome {
	return &Outcome{}
}

// AddResource adds an object to apply (its kind must be among the Blueprint's
// managedResources).
func (o *Outcome) AddResource(object any) *Outcome {
	o.Resources = append(o.Resources, object)
	return o
}

// AddIntent adds a resource in the intent form {"type": kind, "fields": fields}.
func (o *Outcome) AddIntent(kind string, fields any) *Outcome {
	return o.AddResource(Object{"type": kind, "fields": fields})
}

// SetStatus sets status.<key> (creating the status object).
func (o *Outcome) SetStatus(key string, value any) *Outcome {
	if o.Status == nil {
		o.Status = Object{}
	}
	o.Status[key] = value
	return o
}

// SetLabel sets a label on the CR.
func (o *Outcome) SetLabel(key, value string) *Outcome {
	if o.Labels == nil {
		o.Labels = map[string]string{}
	}
	o.Labels[key] = value
	return o
}

// SetAnnotation sets an annotation on the CR.
func (o *Outcome) SetAnnotation(key, value string) *Outcome {
	if o.Annotations == nil {
		o.Annotations = map[string]string{}
	}
	o.Annotations[key] = value
	return o
}

// RequeueNow asks to reconcile again after the host's default delay.
func (o *Outcome) RequeueNow() *Outcome {
	o.Requeue = true
	return o
}

// RequeueIn asks to reconcile again after d (a refresh: it does not hold a deletion).
func (o *Outcome) RequeueIn(d time.Duration) *Outcome {
	o.RequeueAfter = &d
	return o
}

// CleanupIn asks the host to delete the CR after d.
func (o *Outcome) CleanupIn(d time.Duration) *Outcome {
	o.CleanupAfter = &d
	return o
}

// SetCondition sets a condition on the CR, replacing one of the same type in this outcome.
func (o *Outcome) SetCondition(kind string, status ConditionStatus, reason, message string) *Outcome {
	c := Condition{Type: kind, Status: status, Reason: reason, Message: message}
	for i := range o.Conditions {
		if o.Conditions[i].Type == kind {
			o.Conditions[i] = c
			return o
		}
	}
	o.Conditions = append(o.Conditions, c)
	return o
}

// AddEvent asks for a Normal event on the CR.
func (o *Outcome) AddEvent(reason, message string) *Outcome {
	o.Events = append(o.Events, Event{Type: Normal, Reason: reason, Message: message})
	return o
}

// AddWarning asks for a Warning event on the CR.
func (o *Outcome) AddWarning(reason, message string) *Outcome {
	o.Events = append(o.Events, Event{Type: Warning, Reason: reason, Message: message})
	return o
}

// IsEmpty reports whether the outcome declares no resources, status, labels or
// annotations.
func (o *Outcome) IsEmpty() bool {
	return len(o.Resources) == 0 && o.Status == nil && len(o.Labels) == 0 && len(o.Annotations) == 0
}

// WireOutcome is the WIT record inrun:reconciler/types.outcome (0.2.0's, which adds
// conditions and events): JSON values as text. The SDK's glue converts the generated
// bindings' record to and from it; plugins use Outcome.
type WireOutcome struct {
	Status              *string
	Resources           []string
	Labels              [][2]string
	Annotations         [][2]string
	Requeue             bool
	RequeueAfterMs      *uint64
	CleanupAfterSeconds *uint32
	Conditions          []Condition
	Events              []Event
}

// ErrNeedsContract020 fails a call whose outcome has conditions or events in a component
// built against the 0.1.0 contract, which cannot carry them.
var ErrNeedsContract020 = errors.New("conditions and events need a component built against the 0.2.0 contract (wit/0.2.0)")

// Wire writes the outcome as the WIT record: JSON values as text, labels and annotations
// sorted by key, requeue-after in milliseconds, the cleanup grace in whole seconds
// (rounded up, so a short one never becomes zero).
func (o *Outcome) Wire() (WireOutcome, error) {
	var w WireOutcome
	if o.Status != nil {
		status, err := MarshalJSON(o.Status)
		if err != nil {
			return w, fmt.Errorf("outcome.status: %w", err)
		}
		w.Status = &status
	}
	w.Resources = make([]string, 0, len(o.Resources))
	for i, r := range o.Resources {
		text, err := MarshalJSON(r)
		if err != nil {
			return w, fmt.Errorf("outcome.resources[%d]: %w", i, err)
		}
		w.Resources = append(w.Resources, text)
	}
	w.Labels = sortedPairs(o.Labels)
	w.Annotations = sortedPairs(o.Annotations)
	w.Requeue = o.Requeue
	if o.RequeueAfter != nil {
		ms := uint64(0)
		if *o.RequeueAfter > 0 {
			ms = uint64(*o.RequeueAfter / time.Millisecond)
		}
		w.RequeueAfterMs = &ms
	}
	if o.CleanupAfter != nil {
		secs := uint32(0)
		if d := *o.CleanupAfter; d > 0 {
			whole := (d + time.Second - 1) / time.Second
			if whole > math.MaxUint32 {
				whole = math.MaxUint32
			}
			secs = uint32(whole)
		}
		w.CleanupAfterSeconds = &secs
	}
	w.Conditions = append([]Condition(nil), o.Conditions...)
	w.Events = append([]Event(nil), o.Events...)
	return w, nil
}

// ParseOutcome parses an outcome the host sent (a hook's current outcome). A null status
// reads as no status.
func ParseOutcome(w WireOutcome) (*Outcome, error) {
	o := &Outcome{Requeue: w.Requeue}
	if w.Status != nil {
		v, err := ParseJSON(*w.Status)
		if err != nil {
			return nil, jsonError("outcome.status", err)
		}
		switch s := v.(type) {
		case nil:
		case map[string]any:
			o.Status = s
		default:
			return nil, errors.New("outcome.status is not a JSON object")
		}
	}
	o.Resources = make([]any, 0, len(w.Resources))
	for i, text := range w.Resources {
		v, err := ParseJSON(text)
		if err != nil {
			return nil, jsonError(fmt.Sprintf("outcome.resources[%d]", i), err)
		}
		o.Resources = append(o.Resources, v)
	}
	for _, kv := range w.Labels {
		o.SetLabel(kv[0], kv[1])
	}
	for _, kv := range w.Annotations {
		o.SetAnnotation(kv[0], kv[1])
	}
	if w.RequeueAfterMs != nil {
		o.RequeueIn(time.Duration(*w.RequeueAfterMs) * time.Millisecond)
	}
	if w.CleanupAfterSeconds != nil {
		o.CleanupIn(time.Duration(*w.CleanupAfterSeconds) * time.Second)
	}
	o.Conditions = append([]Condition(nil), w.Conditions...)
	o.Events = append([]Event(nil), w.Events...)
	return o, nil
}

func sortedPairs(m map[string]string) [][2]string {
	pairs := make([][2]string, 0, len(m))
	for k, v := range m {
		pairs = append(pairs, [2]string{k, v})
	}
	sort.Slice(pairs, func(i, j int) bool { return pairs[i][0] < pairs[j][0] })
	return pairs
}
