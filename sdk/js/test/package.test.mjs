// Unit tests of inrun-package.js and the example package under Node.js:
//   node --import ./sdk/js/testing/register.mjs --test sdk/js/test/
import { test } from 'node:test';
import assert from 'node:assert/strict';

import { packageExports, Workflow, Options } from '../inrun-package.js';
import { server, requests } from '../testing/http.mjs';
import { secrets } from '../testing/credentials.mjs';
import * as infra from '../../../plugins/js/infra/infra.js';

const wit = (config, event = 'changed') => ({
  config: JSON.stringify(config),
  profile: 'ns--a',
  state: 'running',
  event,
  resource: { group: 'infra.example', version: 'v1', plural: 'things', kind: 'Thing' },
  namespace: 'ns',
  name: 'a',
});

test('options parse the config and keep the rest; a bad config is a validation problem', () => {
  const o = new Options(wit({ size: 2 }));
  assert.deepEqual(o.config, { size: 2 });
  assert.equal(o.profile, 'ns--a');
  assert.equal(o.event, 'changed');
  assert.equal(o.resource.kind, 'Thing');
  const exported = packageExports({
    identity: () => ({ boundary: 'b', profile: 'p', state: [] }),
    observe: () => ({}),
    converge: () => Workflow.completed(),
    delete: () => Workflow.completed(),
  });
  assert.deepEqual(exported.validate({ ...wit({}), config: '[1]' }), ['options.config is not a JSON object']);
  assert.deepEqual(exported.validate(wit({})), [], 'no validate: every options accepted');
});

test('answers become WIT records and a thrown error the step\'s message', () => {
  const exported = packageExports({
    identity: (o) => ({ boundary: 'acct', profile: o.profile, state: ['x', null, undefined] }),
    observe: () => ({ exists: 1, matches: 0 }),
    converge: () => Workflow.pending('still going'),
    delete: () => {
      throw new Error('backend down');
    },
  });
  assert.deepEqual(exported.identity(wit({})), {
    boundary: 'acct',
    profile: 'ns--a',
    state: ['x', undefined, undefined],
  });
  assert.deepEqual(exported.observe(wit({})), { exists: true, matches: false, ready: false });
  assert.deepEqual(exported.converge(wit({})), { progress: 'pending', detail: 'still going' });
  assert.throws(() => exported.delete(wit({})), (e) => e === 'backend down');
  const wrong = packageExports({
    identity: () => ({ boundary: 1 }),
    observe: () => ({}),
    converge: () => 'done',
    delete: () => Workflow.completed(),
  });
  assert.throws(() => wrong.identity(wit({})), (e) => e === 'identity.boundary must be a string');
  assert.throws(() => wrong.converge(wit({})), (e) => /must return a Workflow/.test(e));
  assert.throws(() => packageExports({ identity() {} }), /observe must be a function/);
});

test('the example package converges through http with the credential it reads', () => {
  requests.length = 0;
  server.answer = (r) =>
    r.method === 'GET' ? { status: 404, headers: [], body: [] } : { status: 200, headers: [], body: [] };
  secrets.set('backend/token', 's3cr3t');
  const config = { endpoint: 'http://127.0.0.1:9/', size: 2, token: { secret: 'backend', key: 'token' } };
  assert.deepEqual(infra.validate(wit(config)), []);
  assert.deepEqual(infra.validate(wit({ ...config, size: 0 })), ['config.size must be a whole number from 1, got 0']);
  assert.deepEqual(infra.observe(wit(config)), { exists: false, matches: false, ready: false });
  assert.deepEqual(infra.converge(wit(config)), { progress: 'completed' });
  const put = requests.find((r) => r.method === 'PUT');
  assert.equal(put.url, 'http://127.0.0.1:9/things/ns--a');
  assert.deepEqual(JSON.parse(new TextDecoder().decode(put.body)), { size: 2 });
  assert.ok(put.headers.some(([k, v]) => k === 'authorization' && v === 'Bearer s3cr3t'));
  // A key not granted: the step fails, naming it, never a value.
  const greedy = { ...config, token: { secret: 'backend', key: 'admin' } };
  assert.throws(() => infra.observe(wit(greedy)), (e) => /"admin" of Secret "backend" is not granted/.test(e));
  assert.deepEqual(infra.delete(wit(config)), { progress: 'completed' });
});
