// Glue between the bindings `wit-bindgen go` generates for one world and the SDK: the
// package export_wit_world, which the generated exports call. The build copies the files
// of its world into the generated module; they are compiled only there (a directory
// starting with "_" is ignored by the go command in the SDK's own module).
//
// This file, in every world: the host's log and outbound HTTP.
package export_wit_world

import (
	"errors"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
	"inrun.dev/sdk/inrun"
	wit_host "wit_component/inrun_reconciler_0_1_0_host"
	wit_http "wit_component/inrun_reconciler_0_1_0_http"
)

func init() {
	h := inrun.CurrentHost()
	h.Log = func(level inrun.Level, message string) { wit_host.Log(uint8(level), message) }
	h.Fetch = fetch
	inrun.SetHost(h)
}

func fetch(req inrun.HTTPRequest) (inrun.HTTPResponse, error) {
	body := witTypes.None[[]uint8]()
	if req.Body != nil {
		body = witTypes.Some(req.Body)
	}
	r := wit_http.Fetch(wit_http.Request{
		Method:  req.Method,
		Url:     req.URL,
		Headers: pairs(req.Headers),
		Body:    body,
	})
	if r.IsErr() {
		return inrun.HTTPResponse{}, errors.New(r.Err())
	}
	answer := r.Ok()
	return inrun.HTTPResponse{
		Status:  int(answer.Status),
		Headers: unpairs(answer.Headers),
		Body:    answer.Body,
	}, nil
}

// optional is "" as none.
func optional(s string) witTypes.Option[string] {
	if s == "" {
		return witTypes.None[string]()
	}
	return witTypes.Some(s)
}

func optionalPtr[T any](p *T) witTypes.Option[T] {
	if p == nil {
		return witTypes.None[T]()
	}
	return witTypes.Some(*p)
}

func ptr[T any](o witTypes.Option[T]) *T {
	if o.IsNone() {
		return nil
	}
	v := o.Some()
	return &v
}

func pairs(list [][2]string) []witTypes.Tuple2[string, string] {
	out := make([]witTypes.Tuple2[string, string], len(list))
	for i, kv := range list {
		out[i] = witTypes.Tuple2[string, string]{F0: kv[0], F1: kv[1]}
	}
	return out
}

func unpairs(list []witTypes.Tuple2[string, string]) [][2]string {
	out := make([][2]string, len(list))
	for i, kv := range list {
		out[i] = [2]string{kv.F0, kv.F1}
	}
	return out
}
