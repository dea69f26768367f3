// Test guest: the infrastructure package of plugins/infra (Rust) in JavaScript. Its things
// live in an HTTP service at `config.endpoint`, one per CR, named by its profile:
// `GET /things/<profile>` observes (404: absent; else `size` and `ready`), `PUT` with
// `{"size": n}` converges (202: still working), `DELETE` deletes. `config.token:
// {secret, key}` sends that credential as a bearer token.

import { packageExports, Workflow, fetch, credential, InrunError } from '../../../sdk/js/inrun-package.js';

function url(opts) {
  const endpoint = opts.config.endpoint;
  if (typeof endpoint !== 'string') throw new InrunError('config.endpoint is required');
  return `${endpoint.replace(/\/+$/, '')}/things/${opts.profile}`;
}

function headers(opts) {
  const h = [['x-inrun-event', opts.event], ['content-type', 'application/json']];
  const token = opts.config.token;
  if (token) h.push(['authorization', `Bearer ${credential(token.secret, token.key)}`]);
  return h;
}

const exported = packageExports({
  validate(opts) {
    const size = opts.config.size;
    return Number.isInteger(size) && size >= 1
      ? []
      : [`config.size must be a whole number from 1, got ${JSON.stringify(size)}`];
  },
  identity(opts) {
    url(opts); // config.endpoint is required
    return { boundary: opts.config.endpoint, profile: opts.profile, state: [opts.profile, opts.config.zone] };
  },
  observe(opts) {
    const answer = fetch('GET', url(opts), { headers: headers(opts) });
    if (answer.status === 404) return { exists: false, matches: false, ready: false };
    if (answer.status !== 200) throw new InrunError(`observe: the service answered ${answer.status}`);
    const thing = answer.json();
    return { exists: true, matches: thing.size === opts.config.size, ready: !!thing.ready };
  },
  converge(opts) {
    const answer = fetch('PUT', url(opts), {
      headers: headers(opts),
      body: JSON.stringify({ size: opts.config.size }),
    });
    if ([200, 201, 204].includes(answer.status)) return Workflow.completed();
    if (answer.status === 202) return Workflow.pending();
    throw new InrunError(`converge: the service answered ${answer.status}`);
  },
  delete(opts) {
    const answer = fetch('DELETE', url(opts), { headers: headers(opts) });
    if ([200, 204, 404].includes(answer.status)) return Workflow.completed();
    if (answer.status === 202) return Workflow.pending();
    throw new InrunError(`delete: the service answered ${answer.status}`);
  },
});

export const { validate, identity, observe, converge } = exported;
const remove = exported.delete;
export { remove as delete };
