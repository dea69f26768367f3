// Example hooks that adjust what a Blueprint's templates rendered, the same answers as the
// Rust plugin in plugins/labels-hooks:
// - add-labels: label every resource, and the CR, `demo.inrun.dev/team: <args.team>`
//   (`platform` when the Blueprint passes no `team` argument);
// - annotate: annotate every resource `demo.inrun.dev/rendered-by: hooks`;
// - add-sidecar: add a `log-shipper` container (`busybox:1.36`) to every Deployment.
// Hooks edit full objects only: an intent (`{type, fields}`) passes through untouched.
import { hooks, isObject } from '../../../sdk/js/inrun-sdk.js';

export const TEAM_LABEL = 'demo.inrun.dev/team';
export const DEFAULT_TEAM = 'platform';
export const RENDERED_BY = 'demo.inrun.dev/rendered-by';
export const SIDECAR_NAME = 'log-shipper';
export const SIDECAR_IMAGE = 'busybox:1.36';

/** The resources that are full Kubernetes objects (they have a `kind`), not intents. */
function fullObjects(resources) {
  return resources.filter((r) => isObject(r) && Object.prototype.hasOwnProperty.call(r, 'kind'));
}

/** `parent[field]` as an object, created when missing or not an object. */
function objectField(parent, field) {
  if (!isObject(parent[field])) parent[field] = {};
  return parent[field];
}

function addLabels(req, current) {
  const team = req.optionalArg('team', 'string') ?? DEFAULT_TEAM;
  for (const r of fullObjects(current.resources)) {
    objectField(objectField(r, 'metadata'), 'labels')[TEAM_LABEL] = team;
  }
  return current.label(TEAM_LABEL, team);
}

function annotate(_req, current) {
  for (const r of fullObjects(current.resources)) {
    objectField(objectField(r, 'metadata'), 'annotations')[RENDERED_BY] = 'hooks';
  }
  return current;
}

function addSidecar(_req, current) {
  for (const d of fullObjects(current.resources)) {
    if (d.kind !== 'Deployment') continue;
    const containers = d.spec?.template?.spec?.containers;
    if (!Array.isArray(containers)) continue;
    if (!containers.some((c) => isObject(c) && c.name === SIDECAR_NAME)) {
      containers.push({ name: SIDECAR_NAME, image: SIDECAR_IMAGE });
    }
  }
  return current;
}

export const { functions, call } = hooks({
  'add-labels': addLabels,
  annotate,
  'add-sidecar': addSidecar,
});
