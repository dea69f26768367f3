// The SDK's TypeScript declarations (inrun-sdk.d.ts, inrun-package.d.ts, testing/*.d.mts)
// against its JavaScript: this file uses every export under `strict`, and once compiled it
// runs against the real modules, so a declaration that drifts from what the JavaScript
// does fails either the compile or a test here. Each `@ts-expect-error` line is a call the
// types must refuse (the compile fails if they accept it), next to the error the
// JavaScript throws for it.
//
// host/tests/lang_ts.rs compiles it with the pinned tsc (sdk/js/test/tsconfig.json) and
// runs it with `node --import ./testing/register.mjs --test`.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import * as sdk from '../inrun-sdk.js';
import {
  Outcome,
  Request,
  InrunError,
  check,
  errorMessage,
  hooks,
  invalidType,
  isObject,
  log,
  reconciler,
  canonicalJson,
  type Checker,
  type CheckType,
  type Children,
  type Condition,
  type Event,
  type HookFunction,
  type HooksExports,
  type JsonObject,
  type JsonValue,
  type LogLevel,
  type ReconcileExport,
  type RequestFields,
  type WitOutcome,
  type WitRequest,
  type WrapOptions,
} from '../inrun-sdk.js';
import * as pkg from '../inrun-package.js';
import {
  Options,
  Workflow,
  credential,
  fetch,
  packageExports,
  type FetchResponse,
  type Identity,
  type Observation,
  type Package,
  type PackageExports,
  type WitIdentity,
  type WitOptions,
} from '../inrun-package.js';
import { logged } from '../testing/host.mjs';
import { requests, server } from '../testing/http.mjs';
import { secrets } from '../testing/credentials.mjs';
import type { Request as HttpRequest } from 'inrun:reconciler/http@0.1.0';

/** Every key of `T`, each once: the object literal fails to compile if one is missing or extra. */
type Keys<T> = { [K in keyof T]-?: true };
const keys = <T>(k: Keys<T>): string[] => Object.keys(k).sort();

/** A method or accessor of a class's prototype, or an own field of an instance. */
function members(instance: object): string[] {
  const proto = Object.getPrototypeOf(instance) as object;
  const methods = Object.getOwnPropertyNames(proto).filter((n) => n !== 'constructor');
  return [...Object.keys(instance), ...methods].sort();
}

/** The static members of a class (what `typeof C` has besides `prototype`). */
function statics(cls: Function): string[] {
  return Object.getOwnPropertyNames(cls)
    .filter((n) => !['length', 'name', 'prototype'].includes(n))
    .sort();
}

const cr: JsonObject = {
  apiVersion: 'demo.inrun.dev/v1alpha1',
  kind: 'WebApp',
  metadata: { name: 'shop', namespace: 'prod' },
  spec: { image: 'nginx:1.27', replicas: 3 },
};

test('the declarations name exactly what the modules export', () => {
  const declared = keys<typeof sdk>({
    log: true,
    InrunError: true,
    errorMessage: true,
    check: true,
    invalidType: true,
    isObject: true,
    Request: true,
    Outcome: true,
    canonicalJson: true,
    reconciler: true,
    hooks: true,
  });
  assert.deepEqual(Object.keys(sdk).sort(), declared);
  const declaredPackage = keys<typeof pkg>({
    InrunError: true,
    Options: true,
    Workflow: true,
    fetch: true,
    credential: true,
    packageExports: true,
  });
  assert.deepEqual(Object.keys(pkg).sort(), declaredPackage);
  assert.equal(pkg.InrunError, InrunError, 'the same class from both modules');
});

test('Request: fields, getters, methods and statics as declared', () => {
  const req = Request.forObject(cr, { team: 'payments', n: 7 });
  assert.deepEqual(
    members(req),
    keys<Request>({
      key: true,
      apiVersion: true,
      kind: true,
      object: true,
      args: true,
      finalizing: true,
      target: true,
      children: true,
      toWit: true,
      name: true,
      namespace: true,
      spec: true,
      arg: true,
      optionalArg: true,
    }),
  );
  assert.deepEqual(statics(Request), keys<Omit<typeof Request, 'prototype'>>({ fromWit: true, forObject: true }));

  const key: string = req.key;
  const object: JsonObject = req.object;
  const args: JsonObject = req.args;
  const finalizing: boolean = req.finalizing;
  const target: string | null = req.target;
  const children: Children | null = req.children;
  const name: string = req.name;
  const namespace: string | null = req.namespace;
  const spec: JsonValue = req.spec;
  assert.deepEqual(
    { key, object, args, finalizing, target, children, name, namespace, spec },
    {
      key: 'prod/shop',
      object: cr,
      args: { team: 'payments', n: 7 },
      finalizing: false,
      target: null,
      children: null,
      name: 'shop',
      namespace: 'prod',
      spec: { image: 'nginx:1.27', replicas: 3 },
    },
  );
  const bare = new Request();
  assert.equal(bare.namespace, null);
  assert.equal(bare.spec, null, 'no spec: null');

  // The WIT record, and back.
  const wit: WitRequest = req.toWit();
  assert.deepEqual(Object.keys(wit).sort(), keys<WitRequest>({
    key: true, apiVersion: true, kind: true, object: true, args: true, finalizing: true, target: true, children: true,
  }));
  const expected: WitRequest = {
    key: 'prod/shop',
    apiVersion: 'demo.inrun.dev/v1alpha1',
    kind: 'WebApp',
    object: JSON.stringify(cr),
    args: '{"team":"payments","n":7}',
    finalizing: false,
    target: undefined,
    children: undefined,
  };
  assert.deepEqual(wit, expected);
  const fields: RequestFields = {
    key: 'a',
    target: 'blue',
    children: { ConfigMap: { a: { data: { x: '1' } } } },
    finalizing: true,
  };
  const round = Request.fromWit(new Request(fields).toWit());
  assert.equal(round.target, 'blue');
  assert.deepEqual(round.children, fields.children);
  assert.equal(round.finalizing, true);

  // Arguments: a type name gives its type; a checker its own.
  const team: string = req.arg('team', 'string');
  const n: number = req.arg('n', 'u32');
  const raw: Exclude<JsonValue, null> = req.arg('n');
  const none: string | null = req.optionalArg('absent', 'string');
  const anything: Exclude<JsonValue, null> | null = req.optionalArg('absent');
  const upper: Checker<string> = (value, path) => check(value, 'string', path).toUpperCase();
  const shouted: string = req.arg('team', upper);
  const maybe: string | null = req.optionalArg('absent', upper);
  assert.deepEqual([team, n, raw, none, anything, shouted, maybe], ['payments', 7, 7, null, null, 'PAYMENTS', null]);
  assert.throws(() => req.arg('absent'), { message: 'args.absent is required' });
  // @ts-expect-error a type name check does not know
  assert.throws(() => req.arg('team', 'str'), { message: 'check: unknown type `str`' });
});

test('check, isObject, invalidType and errorMessage', () => {
  const types: Keys<sdk.CheckTypes> = {
    string: true, boolean: true, number: true, integer: true, u8: true, u16: true, u32: true, u64: true,
    object: true, array: true, 'map<string>': true,
  };
  // Every type name is one the JavaScript knows (an unknown one throws "unknown type").
  const samples: { [K in CheckType]: sdk.CheckTypes[K] } = {
    string: 'x', boolean: true, number: 1.5, integer: -3, u8: 255, u16: 65535, u32: 4294967295,
    u64: Number.MAX_SAFE_INTEGER, object: { a: 1 }, array: [1, 'a'], 'map<string>': { a: 'b' },
  };
  for (const type of Object.keys(types) as CheckType[]) {
    assert.deepEqual(check(samples[type], type, 'spec'), samples[type], type);
  }
  const map: { [key: string]: string } = check({ a: 'b' }, 'map<string>', 'spec');
  assert.deepEqual(map, { a: 'b' });
  assert.throws(() => check(70000, 'u16', 'spec.port'), { message: 'spec.port: invalid value: integer `70000`, expected u16' });

  const value: unknown = JSON.parse('{"a":[1]}');
  if (!isObject(value)) assert.fail('an object');
  const a: JsonValue | undefined = value.a;
  assert.deepEqual(a, [1]);
  assert.equal(isObject([1]), false);
  assert.equal(isObject(null), false);

  const err: InrunError = invalidType('spec', 'x', 'a map');
  assert.ok(err instanceof InrunError && err instanceof Error);
  assert.equal(err.message, 'spec: invalid type: string "x", expected a map');
  assert.equal(err.name, 'InrunError');
  const messages: string[] = [err, new TypeError('bug'), 'text', 42].map(errorMessage);
  assert.deepEqual(messages, ['spec: invalid type: string "x", expected a map', 'TypeError: bug', 'text', 'uncaught exception: 42']);
});

test('Outcome: fields and methods as declared, and the WIT record', () => {
  const out = new Outcome();
  assert.deepEqual(
    members(out),
    keys<Outcome>({
      statusFields: true,
      resources: true,
      labels: true,
      annotations: true,
      requeueNow: true,
      requeueAfterMs: true,
      cleanupAfterMs: true,
      conditions: true,
      events: true,
      condition: true,
      event: true,
      resource: true,
      intent: true,
      status: true,
      statusObject: true,
      label: true,
      annotation: true,
      requeue: true,
      requeueAfter: true,
      cleanupAfter: true,
      isEmpty: true,
      toWit: true,
    }),
  );
  assert.deepEqual(statics(Outcome), keys<Omit<typeof Outcome, 'prototype'>>({ fromWit: true }));
  const empty: boolean = out.isEmpty();
  assert.equal(empty, true);

  interface ConfigMap {
    apiVersion: 'v1';
    kind: 'ConfigMap';
    metadata: { name: string };
  }
  const configMap: ConfigMap = { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'a' } };
  const built: Outcome = out
    .resource(configMap)
    .intent('service', { targetPort: 80 })
    .status('url', 'http://a')
    .status({ phase: 'Ready' })
    .statusObject({ replicas: 3 })
    .label('b', '2')
    .label('a', '1')
    .annotation('note', 'x')
    .requeue()
    .requeueAfter(1500)
    .cleanupAfter(200n)
    .condition('Synced', null, 'Waiting')
    .condition('Sized', true, 'SizeSet', 'size 3')
    .event('Resized', 'size 3')
    .event('QuotaLow', 'near quota', { warning: true });
  assert.equal(built, out, 'builders return the outcome');

  const statusFields: { [key: string]: unknown } | null = out.statusFields;
  const resources: object[] = out.resources;
  const labels: Map<string, string> = out.labels;
  const requeueNow: boolean = out.requeueNow;
  const requeueAfterMs: number | null = out.requeueAfterMs;
  const cleanupAfterMs: number | null = out.cleanupAfterMs;
  const conditions: Condition[] = out.conditions;
  const events: Event[] = out.events;
  assert.deepEqual(statusFields, { url: 'http://a', phase: 'Ready', replicas: 3 });
  assert.equal(resources.length, 2);
  assert.ok(labels instanceof Map && out.annotations instanceof Map);
  assert.deepEqual([requeueNow, requeueAfterMs, cleanupAfterMs], [true, 1500, 200]);
  assert.deepEqual(conditions, [
    { type: 'Synced', status: null, reason: 'Waiting', message: '' },
    { type: 'Sized', status: true, reason: 'SizeSet', message: 'size 3' },
  ]);
  assert.deepEqual(events.map((e) => e.type), ['normal', 'warning']);

  const wit: WitOutcome = out.toWit();
  // JSON as built (the host sorts the keys when it reads the outcome).
  const expected: WitOutcome = {
    status: '{"url":"http://a","phase":"Ready","replicas":3}',
    resources: [
      '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}',
      '{"type":"service","fields":{"targetPort":80}}',
    ],
    labels: [['a', '1'], ['b', '2']],
    annotations: [['note', 'x']],
    requeue: true,
    requeueAfterMs: 1500n,
    cleanup: { afterSeconds: 1 },
    conditions: [
      { type: 'Synced', status: undefined, reason: 'Waiting', message: '' },
      { type: 'Sized', status: true, reason: 'SizeSet', message: 'size 3' },
    ],
    events: [
      { type: 'normal', reason: 'Resized', message: 'size 3' },
      { type: 'warning', reason: 'QuotaLow', message: 'near quota' },
    ],
  };
  assert.deepEqual(wit, expected);
  const nothing: WitOutcome = new Outcome().toWit();
  assert.deepEqual(
    [nothing.status, nothing.requeueAfterMs, nothing.cleanup],
    [undefined, undefined, undefined],
  );
  // A 0.1.0 record (no conditions, no events) parses too.
  const { conditions: _c, events: _e, ...old } = wit;
  const back: Outcome = Outcome.fromWit(old);
  assert.deepEqual(back.conditions, []);
  assert.deepEqual(Outcome.fromWit(wit).toWit(), wit);

  // @ts-expect-error a condition's status is true, false or null
  assert.throws(() => new Outcome().condition('A', 'True'), /status must be true, false or null/);
  // @ts-expect-error an event's options are an object: `true` would be read as no options
  assert.equal(new Outcome().event('A', 'b', true).events[0]?.type, 'normal');
  assert.throws(() => new Outcome().requeueAfter(-1), /expected a non-negative number of milliseconds/);

  const text: string = canonicalJson({ b: [{ d: 1, c: 2 }], a: null });
  assert.equal(text, '{"a":null,"b":[{"c":2,"d":1}]}');
  const notJson: string | undefined = canonicalJson(undefined as unknown);
  assert.equal(notJson, undefined);
});

test('reconciler and hooks wrap typed functions as the world exports', () => {
  const reconcile: ReconcileExport = reconciler((req) => new Outcome().status('seen', req.name));
  assert.equal(reconcile(Request.forObject(cr).toWit()).status, '{"seen":"shop"}');
  const failing = reconciler(() => {
    throw new InrunError('no');
  });
  assert.throws(() => failing(Request.forObject(cr).toWit()), (e: unknown) => e === 'no');

  const tag: HookFunction = (_req, current) => current.label('tagged', 'yes');
  const exported: HooksExports = hooks({ tag });
  const names: string[] = exported.functions();
  assert.deepEqual(names, ['tag']);
  const out: WitOutcome = exported.call('tag', Request.forObject(cr).toWit(), new Outcome().toWit());
  assert.deepEqual(out.labels, [['tagged', 'yes']]);
  assert.deepEqual(Object.keys(exported).sort(), keys<HooksExports>({ functions: true, call: true }));
  // @ts-expect-error a hook returns an Outcome
  const wrong = hooks({ bad: () => 42 });
  assert.throws(() => wrong.call('bad', Request.forObject(cr).toWit(), {}), (e: unknown) => e === 'hook `bad` returned 42, not an Outcome');

  const seen: string[] = [];
  const options: WrapOptions = { warmUp: [cr, Request.forObject({ metadata: { name: 'other' } })] };
  reconciler((req) => {
    seen.push(req.name);
    return new Outcome();
  }, options);
  hooks({ tag }, { warmUp: [cr] });
  assert.deepEqual([...new Set(seen)], ['shop', 'other']);
  // @ts-expect-error warm-up requests are CR objects or Requests
  assert.throws(() => reconciler(() => new Outcome(), { warmUp: 'shop' }), /warmUp: expected an array/);
});

test('log writes through the host import with its level', () => {
  log.info('hello', { n: 1 });
  log.log('warn', 'careful');
  const levels: LogLevel[] = ['trace', 'debug', 'info', 'warn', 'error'];
  for (const level of levels) log[level]('at', level);
  const lines: [LogLevel, string][] = logged.slice(-7);
  assert.deepEqual(lines, [
    ['info', 'hello {"n":1}'],
    ['warn', 'careful'],
    ['trace', 'at trace'],
    ['debug', 'at debug'],
    ['info', 'at info'],
    ['warn', 'at warn'],
    ['error', 'at error'],
  ]);
  assert.deepEqual(Object.keys(log).sort(), keys<sdk.Log>({ log: true, trace: true, debug: true, info: true, warn: true, error: true }));
  // @ts-expect-error a level is one of the five
  assert.throws(() => log.log('loud', 'x'), /unknown log level `loud`/);
});

const options: WitOptions = {
  config: '{"endpoint":"http://svc","size":2}',
  profile: 'ns--a',
  state: 'running',
  event: 'changed',
  resource: { group: 'infra.example', version: 'v1', plural: 'things', kind: 'Thing' },
  namespace: 'ns',
  name: 'a',
};

test('Options, Workflow and packageExports as declared', () => {
  const opts = new Options(options);
  const expected: Options = {
    config: { endpoint: 'http://svc', size: 2 },
    profile: 'ns--a',
    state: 'running',
    event: 'changed',
    resource: options.resource,
    namespace: 'ns',
    name: 'a',
  };
  assert.deepEqual({ ...opts }, expected);
  assert.equal(new Options({ ...options, namespace: undefined }).namespace, null);

  assert.deepEqual(Object.keys(Workflow).sort(), ['completed', 'failed', 'pending']);
  const done: Workflow = Workflow.completed();
  const pending: Workflow = Workflow.pending('step 2');
  assert.deepEqual([done, pending, Workflow.failed(null)], [
    { progress: 'completed' },
    { progress: 'pending', detail: 'step 2' },
    { progress: 'failed' },
  ]);

  const impl: Package = {
    validate: (o) => (o.config.size === 2 ? [] : ['config.size must be 2']),
    identity: (o): Identity => ({ boundary: 'acct', profile: o.profile, state: ['x', null, undefined] }),
    observe: (): Observation => ({ exists: true, matches: false, ready: true }),
    converge: () => Workflow.pending('started'),
    delete: () => Workflow.completed(),
  };
  const exported: PackageExports = packageExports(impl);
  assert.deepEqual(
    Object.keys(exported).sort(),
    keys<PackageExports>({ validate: true, identity: true, observe: true, converge: true, delete: true }),
  );
  const problems: string[] = exported.validate(options);
  const identity: WitIdentity = exported.identity(options);
  const seen: Observation = exported.observe(options);
  const converged: Workflow = exported.converge(options);
  const deleted: Workflow = exported.delete(options);
  assert.deepEqual(problems, []);
  assert.deepEqual(identity, { boundary: 'acct', profile: 'ns--a', state: ['x', undefined, undefined] });
  assert.deepEqual(seen, { exists: true, matches: false, ready: true });
  assert.deepEqual(converged, { progress: 'pending', detail: 'started' });
  assert.deepEqual(deleted, { progress: 'completed' });
  assert.deepEqual(exported.validate({ ...options, config: '{"size":3}' }), ['config.size must be 2']);
  // @ts-expect-error identity, observe, converge and delete are required
  assert.throws(() => packageExports({ identity: impl.identity }), /packageExports: observe must be a function/);
});

test('fetch and credential reach the host imports as declared', () => {
  secrets.set('backend/token', 's3cret');
  const token: string = credential('backend', 'token');
  assert.equal(token, 's3cret');
  assert.throws(() => credential('backend', 'other'), (e: unknown) => e instanceof InrunError && /not granted/.test(e.message));

  server.answer = (req: HttpRequest) => ({
    status: 200,
    headers: [['content-type', 'application/json']],
    body: new TextEncoder().encode(JSON.stringify({ method: req.method, size: 2 })),
  });
  const answer: FetchResponse = fetch('PUT', 'http://svc/things/a', {
    headers: [['authorization', `Bearer ${token}`]],
    body: '{"size":2}',
  });
  const sent: HttpRequest | undefined = requests.at(-1);
  assert.ok(sent?.body instanceof Uint8Array);
  assert.deepEqual(sent.headers, [['authorization', 'Bearer s3cret']]);
  const status: number = answer.status;
  const body: Uint8Array = answer.body;
  const json: JsonValue = answer.json();
  assert.equal(status, 200);
  assert.ok(body instanceof Uint8Array);
  assert.deepEqual(answer.headers, [['content-type', 'application/json']]);
  assert.equal(answer.text(), '{"method":"PUT","size":2}');
  assert.deepEqual(json, { method: 'PUT', size: 2 });
  assert.deepEqual(
    Object.keys(answer).sort(),
    keys<FetchResponse>({ status: true, headers: true, body: true, text: true, json: true }),
  );
  server.answer = () => {
    throw 'http: refused';
  };
  assert.throws(() => fetch('GET', 'http://elsewhere/'), (e: unknown) => e instanceof InrunError && e.message === 'http: refused');
});
