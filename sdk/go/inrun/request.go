package inrun

import (
	"fmt"
	"strings"
)

// Request is what the host asks about one custom resource (CR).
type Request struct {
	// Key is "namespace/name", or "name" for a cluster-scoped CR.
	Key string
	// APIVersion is the CR's apiVersion, e.g. "demo.inrun.dev/v1alpha1".
	APIVersion string
	// Kind is the CR's kind, e.g. "WebApp".
	Kind string
	// Object is the CR, minus the paths in the Blueprint's request.object.exclude.
	Object Object
	// Args are the rendered reconcile.args (empty when none are declared).
	Args Object
	// Finalizing is true while the CR is being deleted: writes in the outcome are
	// ignored, and asking to requeue holds the deletion.
	Finalizing bool
	// Target is the serve target the CR came through, or "".
	Target string
	// Children are the children the host observes, grouped by kind then name, when the
	// Blueprint sets request.children; nil otherwise.
	Children Object
}

// RequestFor builds a request for object (taking key, apiVersion and kind from the object
// itself) with args, for unit tests.
func RequestFor(object Object, args Object) *Request {
	text := func(path string) string {
		v, _ := Pointer(object, path)
		s, _ := v.(string)
		return s
	}
	key := text("/metadata/name")
	if ns := text("/metadata/namespace"); ns != "" {
		key = ns + "/" + key
	}
	if args == nil {
		args = Object{}
	}
	return &Request{
		Key:        key,
		APIVersion: text("/apiVersion"),
		Kind:       text("/kind"),
		Object:     object,
		Args:       args,
	}
}

// Name is the CR's metadata.name, or the name part of Key when the object lacks one.
func (r *Request) Name() string {
	if v, ok := Pointer(r.Object, "/metadata/name"); ok {
		if s, ok := v.(string); ok {
			return s
		}
	}
	return r.Key[strings.LastIndex(r.Key, "/")+1:]
}

// Namespace is the CR's metadata.namespace, or the namespace part of Key; "" for a
// cluster-scoped CR.
func (r *Request) Namespace() string {
	if v, ok := Pointer(r.Object, "/metadata/namespace"); ok {
		if s, ok := v.(string); ok && s != "" {
			return s
		}
	}
	if ns, _, ok := strings.Cut(r.Key, "/"); ok {
		return ns
	}
	return ""
}

// Spec is the CR's spec: nil when it has none (or it is null). Usually an Object.
func (r *Request) Spec() any {
	return r.Object["spec"]
}

// DecodeSpec fills the struct (or other value) into points to from the CR's spec (a
// missing spec reads as null), with messages such as
// `spec: invalid type: string "many", expected u32`. See Decode.
func (r *Request) DecodeSpec(into any) error {
	return Decode(r.Spec(), into, "spec")
}

// Arg decodes the argument name of the rendered reconcile.args into the value into points
// to. A missing or null argument is the error `args.NAME is required`; one of the wrong
// type `args.NAME: invalid type: ...`.
func (r *Request) Arg(name string, into any) error {
	present, err := r.OptionalArg(name, into)
	if err == nil && !present {
		err = fmt.Errorf("args.%s is required", name)
	}
	return err
}

// OptionalArg is Arg for an argument that may be missing: it reports whether the argument
// was there (and not null) and leaves the value into points to as it was when not.
func (r *Request) OptionalArg(name string, into any) (bool, error) {
	v, ok := r.Args[name]
	if !ok || v == nil {
		return false, nil
	}
	return true, Decode(v, into, "args."+name)
}

// WireRequest is the WIT record inrun:reconciler/types.request: the CR, args and children
// as JSON text. The SDK's glue converts the generated bindings' record to and from it;
// plugins use Request.
type WireRequest struct {
	Key        string
	APIVersion string
	Kind       string
	Object     string
	Args       string
	Finalizing bool
	Target     *string
	Children   *string
}

// ParseRequest parses the JSON text fields of the request the host sent. The object and
// the args must be JSON objects.
func ParseRequest(w WireRequest) (*Request, error) {
	object, err := parseObject("request.object", w.Object)
	if err != nil {
		return nil, err
	}
	args, err := parseObject("request.args", w.Args)
	if err != nil {
		return nil, err
	}
	req := &Request{
		Key:        w.Key,
		APIVersion: w.APIVersion,
		Kind:       w.Kind,
		Object:     object,
		Args:       args,
		Finalizing: w.Finalizing,
	}
	if w.Target != nil {
		req.Target = *w.Target
	}
	if w.Children != nil {
		if req.Children, err = parseObject("request.children", *w.Children); err != nil {
			return nil, err
		}
	}
	return req, nil
}

// Wire writes the request as the WIT record (the inverse of ParseRequest).
func (r *Request) Wire() (WireRequest, error) {
	object, err := MarshalJSON(orEmpty(r.Object))
	if err != nil {
		return WireRequest{}, fmt.Errorf("request.object: %w", err)
	}
	args, err := MarshalJSON(orEmpty(r.Args))
	if err != nil {
		return WireRequest{}, fmt.Errorf("request.args: %w", err)
	}
	w := WireRequest{
		Key:        r.Key,
		APIVersion: r.APIVersion,
		Kind:       r.Kind,
		Object:     object,
		Args:       args,
		Finalizing: r.Finalizing,
	}
	if r.Target != "" {
		target := r.Target
		w.Target = &target
	}
	if r.Children != nil {
		children, err := MarshalJSON(r.Children)
		if err != nil {
			return WireRequest{}, fmt.Errorf("request.children: %w", err)
		}
		w.Children = &children
	}
	return w, nil
}

func orEmpty(o Object) Object {
	if o == nil {
		return Object{}
	}
	return o
}

// parseObject parses a JSON text field that must hold an object.
func parseObject(field, text string) (Object, error) {
	v, err := ParseJSON(text)
	if err != nil {
		return nil, jsonError(field, err)
	}
	o, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s is not a JSON object", field)
	}
	return o, nil
}
