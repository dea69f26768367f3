// The package world of the 0.2.0 contract: validate, identity, observe, converge, delete,
// and the credentials import.
package export_wit_world

import (
	"errors"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
	"inrun.dev/sdk/infra"
	"inrun.dev/sdk/inrun"
	wit_credentials "wit_component/inrun_reconciler_0_2_0_credentials"
	wit_infra "wit_component/inrun_reconciler_0_2_0_infrastructure"
)

func init() {
	h := inrun.CurrentHost()
	h.Credential = func(name, key string) (string, error) {
		r := wit_credentials.Get(name, key)
		if r.IsErr() {
			return "", errors.New(r.Err())
		}
		return r.Ok(), nil
	}
	inrun.SetHost(h)
}

func options(o wit_infra.Options) infra.WireOptions {
	return infra.WireOptions{
		Config:  o.Config,
		Profile: o.Profile,
		State:   o.State,
		Event:   o.Event,
		Resource: infra.Descriptor{
			Group:   o.Resource.Group,
			Version: o.Resource.Version,
			Plural:  o.Resource.Plural,
			Kind:    o.Resource.Kind,
		},
		Namespace: ptr(o.Namespace),
		Name:      o.Name,
	}
}

// Validate is the validate export.
func Validate(o wit_infra.Options) []string {
	return infra.CallValidate(options(o))
}

// Identity is the identity export.
func Identity(o wit_infra.Options) witTypes.Result[wit_infra.Identity, string] {
	id, err := infra.CallIdentity(options(o))
	if err != nil {
		return witTypes.Err[wit_infra.Identity](err.Error())
	}
	state := make([]witTypes.Option[string], len(id.State))
	for i, entry := range id.State {
		state[i] = optionalPtr(entry)
	}
	return witTypes.Ok[wit_infra.Identity, string](wit_infra.Identity{
		Boundary: id.Boundary,
		Profile:  id.Profile,
		State:    state,
	})
}

// Observe is the observe export.
func Observe(o wit_infra.Options) witTypes.Result[wit_infra.Observation, string] {
	seen, err := infra.CallObserve(options(o))
	if err != nil {
		return witTypes.Err[wit_infra.Observation](err.Error())
	}
	return witTypes.Ok[wit_infra.Observation, string](wit_infra.Observation{
		Exists:  seen.Exists,
		Matches: seen.Matches,
		Ready:   seen.Ready,
	})
}

// Converge is the converge export.
func Converge(o wit_infra.Options) witTypes.Result[wit_infra.Workflow, string] {
	return workflow(infra.CallConverge(options(o)))
}

// Delete is the delete export.
func Delete(o wit_infra.Options) witTypes.Result[wit_infra.Workflow, string] {
	return workflow(infra.CallDelete(options(o)))
}

func workflow(w infra.Workflow, err error) witTypes.Result[wit_infra.Workflow, string] {
	if err != nil {
		return witTypes.Err[wit_infra.Workflow](err.Error())
	}
	return witTypes.Ok[wit_infra.Workflow, string](wit_infra.Workflow{
		Progress: uint8(w.Progress),
		Detail:   optional(w.Detail),
	})
}
