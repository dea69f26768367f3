// The reconciler and hooks worlds: the request record and cluster reads.
package export_wit_world

import (
	"errors"

	"inrun.dev/sdk/inrun"
	wit_cluster "wit_component/inrun_reconciler_0_1_0_cluster"
	wit_types "wit_component/inrun_reconciler_0_1_0_types"
)

func init() {
	h := inrun.CurrentHost()
	h.Get = get
	h.List = list
	inrun.SetHost(h)
}

func wireRequest(r wit_types.Request) inrun.WireRequest {
	return inrun.WireRequest{
		Key:        r.Key,
		APIVersion: r.ApiVersion,
		Kind:       r.Kind,
		Object:     r.Object,
		Args:       r.Args,
		Finalizing: r.Finalizing,
		Target:     ptr(r.Target),
		Children:   ptr(r.Children),
	}
}

func get(apiVersion, kind, namespace, name string) (string, bool, error) {
	r := wit_cluster.Get(apiVersion, kind, optional(namespace), name)
	if r.IsErr() {
		return "", false, errors.New(r.Err())
	}
	if found := r.Ok(); found.IsSome() {
		return found.Some(), true, nil
	}
	return "", false, nil
}

func list(apiVersion, kind, namespace, selector string) ([]string, error) {
	r := wit_cluster.List(apiVersion, kind, optional(namespace), optional(selector))
	if r.IsErr() {
		return nil, errors.New(r.Err())
	}
	return r.Ok(), nil
}
