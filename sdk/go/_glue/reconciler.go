// The reconciler world: the reconcile export.
package export_wit_world

import (
	witTypes "go.bytecodealliance.org/pkg/wit/types"
	"inrun.dev/sdk/inrun"
	wit_types "wit_component/inrun_reconciler_0_1_0_types"
)

// Reconcile is the reconcile export: the plugin's inrun.ExportReconciler function.
func Reconcile(req wit_types.Request) witTypes.Result[witOutcome, string] {
	out, err := inrun.Reconcile(wireRequest(req))
	return answer(out, err)
}

func answer(out inrun.WireOutcome, err error) witTypes.Result[witOutcome, string] {
	if err != nil {
		return witTypes.Err[witOutcome](err.Error())
	}
	o, err := toWit(out)
	if err != nil {
		return witTypes.Err[witOutcome](err.Error())
	}
	return witTypes.Ok[witOutcome, string](o)
}
