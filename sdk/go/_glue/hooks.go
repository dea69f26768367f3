// The hooks world: the functions and call exports.
package export_wit_world

import (
	witTypes "go.bytecodealliance.org/pkg/wit/types"
	"inrun.dev/sdk/inrun"
	wit_types "wit_component/inrun_reconciler_0_1_0_types"
)

// Functions is the functions export: the names given to inrun.ExportHooks.
func Functions() []string {
	return inrun.HookFunctions()
}

// Call is the call export: runs the named hook function on the outcome so far.
func Call(function string, req wit_types.Request, current witOutcome) witTypes.Result[witOutcome, string] {
	out, err := inrun.CallHook(function, wireRequest(req), fromWit(current))
	if err != nil {
		return witTypes.Err[witOutcome](err.Error())
	}
	o, err := toWit(out)
	if err != nil {
		return witTypes.Err[witOutcome](err.Error())
	}
	return witTypes.Ok[witOutcome, string](o)
}
