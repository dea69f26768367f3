// Example constructor: a `WebApp` CR becomes a Deployment and a Service, the same
// answer as the Rust plugin in plugins/webapp (same JSON, status and label).
import { reconciler, Outcome, InrunError, check, invalidType, isObject } from '../../../sdk/js/inrun-sdk.js';

/** The label every object of one WebApp carries, and the selector that finds its pods. */
export const NAME_LABEL = 'app.kubernetes.io/name';
/** The label the reconciler sets on the WebApp itself. */
export const TIER_LABEL = 'demo.inrun.dev/tier';

/**
 * Reads the spec with the Rust plugin's rules and messages: fields are checked in key
 * order (env, image, port, replicas); unknown fields are ignored.
 */
function readSpec(spec) {
  if (!isObject(spec)) throw invalidType('spec', spec, 'struct WebAppSpec');
  const env = spec.env === undefined ? {} : check(spec.env, 'map<string>', 'spec');
  const image = spec.image === undefined || spec.image === null ? null : check(spec.image, 'string', 'spec');
  const port = spec.port === undefined ? 8080 : check(spec.port, 'u16', 'spec');
  const replicas = spec.replicas === undefined ? 1 : check(spec.replicas, 'u32', 'spec');
  return { env, image, port, replicas };
}

/** What a WebApp should become; a finalizing CR gets an empty outcome. */
export function reconcileWebApp(req) {
  if (req.finalizing) return new Outcome();
  if (req.spec === null) throw new InrunError('spec.image is required');
  const spec = readSpec(req.spec);
  if (!spec.image) throw new InrunError('spec.image is required');
  const name = req.name;
  const namespace = req.namespace ?? 'default';
  return new Outcome()
    .resource(deployment(name, namespace, spec))
    .resource(service(name, namespace, spec.port))
    .status('image', spec.image)
    .status('replicas', spec.replicas)
    .status('url', `http://${name}.${namespace}.svc:80`)
    .label(TIER_LABEL, 'web');
}

function deployment(name, namespace, spec) {
  const labels = { [NAME_LABEL]: name };
  const container = {
    name: 'web',
    image: spec.image,
    ports: [{ name: 'http', containerPort: spec.port, protocol: 'TCP' }],
  };
  const keys = Object.keys(spec.env).sort();
  if (keys.length > 0) container.env = keys.map((k) => ({ name: k, value: spec.env[k] }));
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name, namespace, labels },
    spec: {
      replicas: spec.replicas,
      selector: { matchLabels: labels },
      template: { metadata: { labels }, spec: { containers: [container] } },
    },
  };
}

function service(name, namespace, port) {
  const labels = { [NAME_LABEL]: name };
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name, namespace, labels },
    spec: {
      selector: labels,
      ports: [{ name: 'http', port: 80, targetPort: port, protocol: 'TCP' }],
    },
  };
}

/**
 * A WebApp the reconciler runs on when componentize-js builds the component, so every
 * instance starts with its code compiled (the SDK's `warmUp`; ~30 % of a fresh call).
 */
const WARM_UP = {
  apiVersion: 'demo.inrun.dev/v1alpha1',
  kind: 'WebApp',
  metadata: { name: 'warm-up', namespace: 'default' },
  spec: { image: 'nginx:1.27', replicas: 1, port: 8080, env: { MODE: 'warm-up' } },
};

export const reconcile = reconciler(reconcileWebApp, { warmUp: [WARM_UP] });
