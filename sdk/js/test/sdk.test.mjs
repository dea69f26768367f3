// Unit tests of inrun-sdk.js and the example plugins under Node.js:
//   node --import ./sdk/js/testing/register.mjs --test sdk/js/test/
import { test } from 'node:test';
import assert from 'node:assert/strict';

import { Outcome, Request, reconciler, hooks, check, log, canonicalJson } from '../inrun-sdk.js';
import { logged } from '../testing/host.mjs';
import { reconcile as webapp } from '../../../plugins/js/webapp/webapp.js';
import { functions, call } from '../../../plugins/js/hooks/hooks.js';

const shop = (spec) =>
  Request.forObject({
    apiVersion: 'demo.inrun.dev/v1alpha1',
    kind: 'WebApp',
    metadata: { name: 'shop', namespace: 'prod' },
    spec,
  });

test('an outcome becomes the WIT record: JSON as built, sorted pairs, a BigInt u64', () => {
  const wit = new Outcome()
    .resource({ kind: 'ConfigMap', apiVersion: 'v1' })
    .intent('deployment', { replicas: 3 })
    .status('url', 'http://a')
    .status({ phase: 'Ready' })
    .label('b', '2')
    .label('a', '1')
    .label('b', '3')
    .requeue()
    .requeueAfter(1500)
    .cleanupAfter(200)
    .toWit();
  // Keys in the order they were set: the host sorts them when it reads the outcome.
  assert.deepEqual(wit.resources, ['{"kind":"ConfigMap","apiVersion":"v1"}', '{"type":"deployment","fields":{"replicas":3}}']);
  assert.equal(wit.status, '{"url":"http://a","phase":"Ready"}');
  assert.deepEqual(wit.labels, [['a', '1'], ['b', '3']]);
  assert.equal(wit.requeue, true);
  assert.equal(wit.requeueAfterMs, 1500n);
  assert.deepEqual(wit.cleanup, { afterSeconds: 1 });
  assert.equal(new Outcome().toWit().status, undefined);
});

test('an outcome round-trips through the WIT record', () => {
  const out = new Outcome().resource({ a: 1 }).status('x', true).annotation('c', 'd').requeueAfter(30000).cleanupAfter(600000);
  const back = Outcome.fromWit(out.toWit());
  assert.deepEqual(back.toWit(), out.toWit());
  assert.equal(back.isEmpty(), false);
  assert.equal(new Outcome().requeue().isEmpty(), true);
});

test('conditions and events cross as the 0.2.0 record and round-trip', () => {
  const out = new Outcome()
    .condition('Sized', true, 'SizeSet', 'size is 3')
    .condition('Synced', null, 'Waiting')
    .condition('Sized', false, 'NoSize')
    .event('Resized', 'size 3')
    .event('QuotaLow', 'near quota', { warning: true });
  const wit = out.toWit();
  assert.deepEqual(wit.conditions, [
    { type: 'Synced', status: undefined, reason: 'Waiting', message: '' },
    { type: 'Sized', status: false, reason: 'NoSize', message: '' },
  ]);
  assert.deepEqual(wit.events.map((e) => e.type), ['normal', 'warning']);
  assert.deepEqual(Outcome.fromWit(wit).toWit(), wit);
  assert.throws(() => new Outcome().condition('A', 'yes'), /status must be true, false or null/);
});

test('request fields are parsed and named like the Rust SDK', () => {
  const req = Request.fromWit({ key: 'ns/a', apiVersion: 'v1', kind: 'K', object: '{"metadata":{"name":"a"}}', args: '{"n":7}', finalizing: false });
  assert.equal(req.name, 'a');
  assert.equal(req.namespace, 'ns');
  assert.equal(req.spec, null);
  assert.equal(req.arg('n', 'u32'), 7);
  assert.equal(req.optionalArg('missing'), null);
  assert.throws(() => req.arg('missing'), { message: 'args.missing is required' });
  assert.throws(() => req.arg('n', 'string'), { message: 'args.n: invalid type: integer `7`, expected a string' });
  assert.throws(() => Request.fromWit({ ...req.toWit(), object: '{' }), /request.object is not valid JSON/);
});

test('check gives serde-like messages', () => {
  assert.throws(() => check(-1, 'u16', 'spec'), { message: 'spec: invalid value: integer `-1`, expected u16' });
  assert.throws(() => check(2.5, 'u32', 'spec'), { message: 'spec: invalid type: floating point `2.5`, expected u32' });
  assert.throws(() => check({ A: 1 }, 'map<string>', 'spec'), { message: 'spec: invalid type: integer `1`, expected a string' });
  assert.equal(canonicalJson({ b: [{ d: 1, c: 2 }], a: null }), '{"a":null,"b":[{"c":2,"d":1}]}');
});

test('exceptions become the call error; an Error gives its message, other types their name', () => {
  const fails = (thrown) => reconciler(() => { throw thrown; })(shop({}).toWit());
  assert.throws(() => fails(new Error('plain')), (e) => e === 'plain');
  assert.throws(() => fails(new TypeError('bug')), (e) => e === 'TypeError: bug');
  assert.throws(() => fails('text'), (e) => e === 'text');
  assert.throws(() => reconciler(() => 42)(shop({}).toWit()), (e) => e === 'reconcile returned 42, not an Outcome');
  assert.throws(() => reconciler(async () => new Outcome())(shop({}).toWit()), (e) => /must be synchronous/.test(e));
});

test('log lines reach the host import with their level', () => {
  log.warn('careful', { n: 1 });
  assert.deepEqual(logged.at(-1), ['warn', 'careful {"n":1}']);
});

test('the webapp plugin declares a Deployment, a Service, status and the tier label', () => {
  const wit = webapp(shop({ image: 'nginx:1.27', replicas: 3, env: { B: '2', A: '1' } }).toWit());
  const [deployment, service] = wit.resources.map((r) => JSON.parse(r));
  assert.equal(deployment.spec.replicas, 3);
  assert.deepEqual(deployment.spec.template.spec.containers[0].env, [{ name: 'A', value: '1' }, { name: 'B', value: '2' }]);
  assert.equal(service.spec.ports[0].targetPort, 8080);
  assert.equal(wit.status, '{"image":"nginx:1.27","replicas":3,"url":"http://shop.prod.svc:80"}');
  assert.deepEqual(wit.labels, [['demo.inrun.dev/tier', 'web']]);
  assert.throws(() => webapp(shop({ replicas: 2 }).toWit()), (e) => e === 'spec.image is required');
});

test('the hooks plugin lists its functions and refuses others', () => {
  assert.deepEqual(functions(), ['add-labels', 'annotate', 'add-sidecar']);
  const current = new Outcome()
    .resource({ apiVersion: 'apps/v1', kind: 'Deployment', metadata: { name: 'shop' }, spec: { template: { spec: { containers: [{ name: 'web' }] } } } })
    .intent('service', {})
    .toWit();
  const req = Request.forObject({ metadata: { name: 'shop' } }, { team: 'payments' }).toWit();
  const labelled = call('add-labels', req, current);
  assert.deepEqual(JSON.parse(labelled.resources[0]).metadata.labels, { 'demo.inrun.dev/team': 'payments' });
  assert.equal(labelled.resources[1], current.resources[1], 'intents pass through');
  const twice = call('add-sidecar', req, call('add-sidecar', req, current));
  assert.equal(JSON.parse(twice.resources[0]).spec.template.spec.containers.length, 2);
  assert.throws(() => call('nope', req, current), (e) => e === 'unknown hook function `nope`; this plugin has: add-labels, annotate, add-sidecar');
});

test('hooks() and reconciler() wrap user functions', () => {
  const h = hooks({ tag: (_req, current) => current.label('tagged', 'yes') });
  const out = h.call('tag', shop({}).toWit(), new Outcome().label('kept', '1').toWit());
  assert.deepEqual(out.labels, [['kept', '1'], ['tagged', 'yes']]);
});

test('a warm-up runs the wrapped functions on each CR when the module loads, quietly', () => {
  const seen = [];
  const before = logged.length;
  reconciler((req) => {
    seen.push(req.name);
    log.info('not logged while warming up');
    if (req.name === 'bad') throw new Error('refused');
    return new Outcome();
  }, { warmUp: [{ metadata: { name: 'shop', namespace: 'prod' }, spec: {} }, { metadata: { name: 'bad' } }] });
  assert.deepEqual(seen, ['shop', 'shop', 'bad', 'bad'], 'each CR twice, a refused one too');
  assert.equal(logged.length, before, 'log lines are dropped during the warm-up');
  log.info('logged again');
  assert.deepEqual(logged.at(-1), ['info', 'logged again']);

  const called = [];
  const h = hooks(
    { a: (req, current) => (called.push(['a', req.name, current.isEmpty()]), current), b: (req, current) => (called.push(['b', req.name]), current) },
    { warmUp: [{ metadata: { name: 'shop' } }] },
  );
  assert.deepEqual(called, [['a', 'shop', true], ['a', 'shop', true], ['b', 'shop'], ['b', 'shop']]);
  assert.deepEqual(h.functions(), ['a', 'b']);
  assert.throws(() => reconciler(() => new Outcome(), { warmUp: { metadata: {} } }), /warmUp: expected an array of CR objects/);
  assert.equal(typeof reconciler(() => new Outcome(), null), 'function', 'no options');
});
