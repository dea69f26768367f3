// The @KIND@ reconciler: a ConfigMap with `spec.message`, and the message in status.
// componentize-js follows relative imports only, so the SDK is imported from node_modules
// by path: `../` resolves alike from src/ and from dist/, where tsc writes app.js. Its
// types come from the inrun-sdk.d.ts beside it.
import {
  reconciler,
  Outcome,
  InrunError,
  isObject,
  type JsonObject,
  type Request,
} from '../node_modules/inrun-sdk/inrun-sdk.js';

export function decide(req: Request): Outcome {
  if (req.finalizing) return new Outcome();
  const spec: JsonObject = isObject(req.spec) ? req.spec : {};
  const message = spec.message ?? 'hello';
  if (typeof message !== 'string') throw new InrunError('spec.message must be a string');
  return new Outcome()
    .resource({
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: req.name, namespace: req.namespace },
      data: { message },
    })
    .status('message', message);
}

// A CR the reconciler runs on while the component is built, so each fresh instance starts
// with this code compiled (a third of a fresh call saved; see the SDK README, "Warm-up").
const WARM_UP = { apiVersion: 'example.inrun.dev/v1alpha1', kind: '@KIND@',
                  metadata: { name: 'warm-up', namespace: 'default' }, spec: { message: 'hello' } };

export const reconcile = reconciler(decide, { warmUp: [WARM_UP] });
