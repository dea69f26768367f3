// Inrun SDK for JavaScript: write reconcilers and hooks as WebAssembly components with
// componentize-js.
//
// The WIT contract (`wit/reconciler.wit`, package `inrun:reconciler@0.1.0`, or the
// `reconciler` and `hooks` worlds of `wit/0.2.0`, whose outcome adds conditions and events) passes
// Kubernetes objects as JSON text. This module parses them into plain JavaScript values
// (`Request`), gives an `Outcome` builder that turns back into the WIT record, wraps the
// `host.log` import (`log.info(...)`), and turns a thrown exception into the call's error
// message.
//
//   import { reconciler, Outcome } from './inrun-sdk.js';
//   export const reconcile = reconciler((req) => new Outcome().status('seen', req.name));
//
// Objects cross as `JSON.stringify` writes them, keys in the order they were set: the host
// sorts every object's keys when it reads an outcome, so what is applied, rendered and
// stamped is the same whatever the order (and byte for byte what the Rust SDK gives).
// Labels and annotations are sorted by key, the last value of a repeated key wins.

import { log as hostLog } from 'inrun:reconciler/host@0.1.0';

// ---------------------------------------------------------------------------------------
// Logging

const LEVELS = ['trace', 'debug', 'info', 'warn', 'error'];

/** True while `reconciler` or `hooks` run their warm-up requests: log lines are dropped. */
let warming = false;

/** Writes `message` to the host's log at `level` (trace, debug, info, warn, error). */
function write(level, message) {
  if (!LEVELS.includes(level)) {
    throw new InrunError(`unknown log level \`${level}\`; use one of ${LEVELS.join(', ')}`);
  }
  if (warming) return;
  hostLog(level, typeof message === 'string' ? message : String(message));
}

/**
 * The host's log: each line is tagged with the plugin's name and digest. Several
 * arguments are joined with spaces; objects are written as JSON.
 */
export const log = {
  log: write,
  trace: (...parts) => write('trace', text(parts)),
  debug: (...parts) => write('debug', text(parts)),
  info: (...parts) => write('info', text(parts)),
  warn: (...parts) => write('warn', text(parts)),
  error: (...parts) => write('error', text(parts)),
};

function text(parts) {
  return parts
    .map((p) => (typeof p === 'string' ? p : p instanceof Error ? String(p) : safeJson(p)))
    .join(' ');
}

function safeJson(value) {
  try {
    const s = JSON.stringify(value, (_k, v) => (typeof v === 'bigint' ? v.toString() : v));
    return s === undefined ? String(value) : s;
  } catch {
    return String(value);
  }
}

// ---------------------------------------------------------------------------------------
// Errors

/**
 * An error whose message is the whole answer: the call fails with exactly this text.
 * Throwing a plain `Error` does the same; other error types (a `TypeError` from a bug)
 * fail the call with their name in front (`TypeError: x is undefined`).
 */
export class InrunError extends Error {
  constructor(message) {
    super(message);
    this.name = 'InrunError';
  }
}

/** The message a thrown value fails the call with. */
export function errorMessage(e) {
  if (e instanceof InrunError) return e.message;
  if (e instanceof Error) {
    return e.name === 'Error' ? e.message : `${e.name}: ${e.message}`;
  }
  if (typeof e === 'string') return e;
  return `uncaught exception: ${safeJson(e)}`;
}

// ---------------------------------------------------------------------------------------
// Type checks with the same messages the Rust SDK's serde gives

/** How serde names an unexpected JSON value (`integer \`7\``, `string "x"`, `map`...). */
function unexpected(value) {
  if (value === null || value === undefined) return 'null';
  switch (typeof value) {
    case 'boolean':
      return `boolean \`${value}\``;
    case 'number':
      return Number.isInteger(value) ? `integer \`${value}\`` : `floating point \`${floatText(value)}\``;
    case 'string':
      return `string ${JSON.stringify(value)}`;
    default:
      return Array.isArray(value) ? 'sequence' : 'map';
  }
}

function floatText(n) {
  const s = String(n);
  return /[.e]/.test(s) ? s : `${s}.0`;
}

const UNSIGNED = { u8: 0xff, u16: 0xffff, u32: 0xffffffff, u64: Number.MAX_SAFE_INTEGER };

/**
 * Checks that `value` has `type` and returns it, or throws `<path>: invalid type: ...`.
 *
 * Types: `string`, `boolean`, `number`, `integer`, `u8`, `u16`, `u32`, `u64`, `object`,
 * `array`, `map<string>` (an object whose values are all strings), or a function
 * `(value, path) => value` of your own.
 */
export function check(value, type, path) {
  if (typeof type === 'function') return type(value, path);
  const fail = (expected) => {
    throw invalidType(path, value, expected);
  };
  switch (type) {
    case 'string':
      if (typeof value !== 'string') fail('a string');
      return value;
    case 'boolean':
      if (typeof value !== 'boolean') fail('a boolean');
      return value;
    case 'number':
      if (typeof value !== 'number') fail('f64');
      return value;
    case 'integer':
      if (!Number.isInteger(value)) fail('i64');
      return value;
    case 'u8':
    case 'u16':
    case 'u32':
    case 'u64':
      if (!Number.isInteger(value)) fail(type);
      if (value < 0 || value > UNSIGNED[type]) {
        throw new InrunError(`${path}: invalid value: integer \`${value}\`, expected ${type}`);
      }
      return value;
    case 'object':
      if (!isObject(value)) fail('a map');
      return value;
    case 'array':
      if (!Array.isArray(value)) fail('a sequence');
      return value;
    case 'map<string>':
      if (!isObject(value)) fail('a map');
      for (const key of Object.keys(value).sort()) check(value[key], 'string', path);
      return value;
    default:
      throw new InrunError(`check: unknown type \`${type}\``);
  }
}

/** The error `<path>: invalid type: <what value is>, expected <expected>`. */
export function invalidType(path, value, expected) {
  return new InrunError(`${path}: invalid type: ${unexpected(value)}, expected ${expected}`);
}

/** True for a JSON object (not null, not an array). */
export function isObject(value) {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

// ---------------------------------------------------------------------------------------
// Request

function parseJson(field, textValue) {
  try {
    return JSON.parse(textValue);
  } catch (e) {
    throw new InrunError(`${field} is not valid JSON: ${e.message}`);
  }
}

/** What the host asks about one CR; `object`, `args` and `children` are parsed JSON. */
export class Request {
  constructor({ key = '', apiVersion = '', kind = '', object = {}, args = {}, finalizing = false, target = null, children = null } = {}) {
    /** "namespace/name", or "name" for a cluster-scoped CR. */
    this.key = key;
    this.apiVersion = apiVersion;
    this.kind = kind;
    /** The CR, minus the Blueprint's `request.object.exclude` paths. */
    this.object = object;
    /** The rendered `reconcile.args` (`{}` when none are declared). */
    this.args = args;
    /** True while the CR is being deleted: writes are ignored, a requeue holds deletion. */
    this.finalizing = finalizing;
    /** The serve target the CR came through, or null. */
    this.target = target ?? null;
    /** The observed children (by kind, then name) when `request.children` is set, or null. */
    this.children = children ?? null;
  }

  /** Parses the WIT `request` record (JSON text fields). */
  static fromWit(req) {
    return new Request({
      key: req.key,
      apiVersion: req.apiVersion,
      kind: req.kind,
      object: parseJson('request.object', req.object),
      args: parseJson('request.args', req.args),
      finalizing: req.finalizing,
      target: req.target ?? null,
      children: req.children == null ? null : parseJson('request.children', req.children),
    });
  }

  /** A request for `object` as the host would build it (for unit tests). */
  static forObject(object, args = {}) {
    const meta = isObject(object?.metadata) ? object.metadata : {};
    const name = typeof meta.name === 'string' ? meta.name : '';
    const ns = typeof meta.namespace === 'string' && meta.namespace !== '' ? meta.namespace : null;
    return new Request({
      key: ns ? `${ns}/${name}` : name,
      apiVersion: typeof object?.apiVersion === 'string' ? object.apiVersion : '',
      kind: typeof object?.kind === 'string' ? object.kind : '',
      object,
      args,
    });
  }

  /** The WIT `request` record (for unit tests that call an export directly). */
  toWit() {
    return {
      key: this.key,
      apiVersion: this.apiVersion,
      kind: this.kind,
      object: JSON.stringify(this.object),
      args: JSON.stringify(this.args),
      finalizing: this.finalizing,
      target: this.target ?? undefined,
      children: this.children == null ? undefined : JSON.stringify(this.children),
    };
  }

  /** `metadata.name`, or the name part of the key. */
  get name() {
    const name = this.object?.metadata?.name;
    return typeof name === 'string' ? name : this.key.slice(this.key.lastIndexOf('/') + 1);
  }

  /** `metadata.namespace`, or the namespace part of the key; null when cluster-scoped. */
  get namespace() {
    const ns = this.object?.metadata?.namespace;
    if (typeof ns === 'string' && ns !== '') return ns;
    const slash = this.key.indexOf('/');
    return slash >= 0 ? this.key.slice(0, slash) : null;
  }

  /** The CR's `spec`, or null when it has none. */
  get spec() {
    return this.object?.spec ?? null;
  }

  /** `args[name]`, checked against `type` when given; throws `args.<name> is required`. */
  arg(name, type) {
    const value = this.optionalArg(name, type);
    if (value === null) throw new InrunError(`args.${name} is required`);
    return value;
  }

  /** `args[name]` checked against `type` when given, or null when absent or null. */
  optionalArg(name, type) {
    const value = isObject(this.args) ? this.args[name] : undefined;
    if (value === undefined || value === null) return null;
    return type === undefined ? value : check(value, type, `args.${name}`);
  }
}

// ---------------------------------------------------------------------------------------
// Outcome

function ceilSeconds(ms) {
  return Math.min(Math.ceil(ms / 1000), 0xffffffff);
}

function durationMs(value, what) {
  if (typeof value === 'bigint') value = Number(value);
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) {
    throw new InrunError(`${what}: expected a non-negative number of milliseconds, got ${safeJson(value)}`);
  }
  return Math.floor(value);
}

/**
 * JSON text with object keys sorted at every level, as the host reads an outcome (for tests
 * and digests of your own; `Outcome` does not need it).
 */
export function canonicalJson(value) {
  return JSON.stringify(sortKeys(value));
}

function sortKeys(value) {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value !== null && typeof value === 'object') {
    if (typeof value.toJSON === 'function') return sortKeys(value.toJSON());
    const out = {};
    for (const key of Object.keys(value).sort()) {
      if (value[key] !== undefined && typeof value[key] !== 'function') out[key] = sortKeys(value[key]);
    }
    return out;
  }
  return value;
}

/**
 * What a reconciler declares the CR should become. Every builder method returns the
 * outcome, so calls chain. Durations are milliseconds.
 */
export class Outcome {
  constructor() {
    /** Merged into the CR's status (the outcome wins over `emit.status`); null for none. */
    this.statusFields = null;
    /** Objects to apply: full objects or intents `{type, fields}`. */
    this.resources = [];
    /** Labels for the CR (a `Map`, written sorted by key). */
    this.labels = new Map();
    /** Annotations for the CR (a `Map`, written sorted by key). */
    this.annotations = new Map();
    this.requeueNow = false;
    /** Milliseconds, or null. */
    this.requeueAfterMs = null;
    /** Milliseconds, or null; crosses as whole seconds rounded up. */
    this.cleanupAfterMs = null;
    /** Conditions for the CR: `{type, status: true|false|null, reason, message}`. */
    this.conditions = [];
    /** Events for the CR: `{type: 'normal'|'warning', reason, message}`. */
    this.events = [];
  }

  /**
   * Sets a condition on the CR: `status` true, false or null (Unknown). Merged by type with
   * those already there; `Ready` and `Reconciled` are the host's. Reaches the CR from a
   * component built against `wit/0.2.0` (a 0.1.0 world has no place for it).
   */
  condition(type, status, reason = '', message = '') {
    if (status !== true && status !== false && status !== null) {
      throw new InrunError(`condition ${type}: status must be true, false or null, got ${safeJson(status)}`);
    }
    this.conditions = this.conditions.filter((c) => c.type !== type);
    this.conditions.push({ type: String(type), status, reason: String(reason), message: String(message) });
    return this;
  }

  /**
   * Asks for an event on the CR (`{ warning: true }` for a Warning). The host rate-limits a
   * CR's events. Reaches the CR from a component built against `wit/0.2.0`.
   */
  event(reason, message = '', { warning = false } = {}) {
    this.events.push({ type: warning ? 'warning' : 'normal', reason: String(reason), message: String(message) });
    return this;
  }

  /** Adds a full Kubernetes object to apply. */
  resource(object) {
    this.resources.push(object);
    return this;
  }

  /** Adds an object in intent form: `{"type": type, "fields": fields}`. */
  intent(type, fields) {
    this.resources.push({ type, fields });
    return this;
  }

  /** Sets `status[key] = value`; with one object argument, merges all its keys. */
  status(key, value) {
    if (isObject(key) && value === undefined) return this.statusObject(key);
    if (this.statusFields === null) this.statusFields = {};
    this.statusFields[key] = value;
    return this;
  }

  /** Merges every key of `fields` into the status (later keys win). */
  statusObject(fields) {
    if (this.statusFields === null) this.statusFields = {};
    Object.assign(this.statusFields, fields);
    return this;
  }

  /** Sets a label on the CR. `inrun.dev/` keys are reserved for the host. */
  label(key, value) {
    this.labels.set(String(key), String(value));
    return this;
  }

  /** Sets an annotation on the CR. */
  annotation(key, value) {
    this.annotations.set(String(key), String(value));
    return this;
  }

  /** Reconcile again soon (after the host's default delay). */
  requeue() {
    this.requeueNow = true;
    return this;
  }

  /** Reconcile again after `ms` milliseconds. */
  requeueAfter(ms) {
    this.requeueAfterMs = durationMs(ms, 'requeueAfter');
    return this;
  }

  /** Delete the CR itself after `ms` milliseconds (rounded up to whole seconds). */
  cleanupAfter(ms) {
    this.cleanupAfterMs = durationMs(ms, 'cleanupAfter');
    return this;
  }

  /** True when the outcome writes nothing (a requeue alone is still empty). */
  isEmpty() {
    return (
      this.resources.length === 0 &&
      (this.statusFields === null || Object.keys(this.statusFields).length === 0) &&
      this.labels.size === 0 &&
      this.annotations.size === 0
    );
  }

  /**
   * The WIT `outcome` record: JSON text (keys as set; the host sorts them), sorted pairs, a
   * BigInt for the u64.
   */
  toWit() {
    const pairs = (map) => [...map.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return {
      status: this.statusFields === null ? undefined : JSON.stringify(this.statusFields),
      resources: this.resources.map((r, i) => {
        const json = JSON.stringify(r);
        if (json === undefined) throw new InrunError(`outcome.resources[${i}] is not JSON`);
        return json;
      }),
      labels: pairs(this.labels),
      annotations: pairs(this.annotations),
      requeue: this.requeueNow,
      requeueAfterMs: this.requeueAfterMs === null ? undefined : BigInt(this.requeueAfterMs),
      cleanup: this.cleanupAfterMs === null ? undefined : { afterSeconds: ceilSeconds(this.cleanupAfterMs) },
      // The 0.2.0 outcome's fields; a 0.1.0 world's record has none and ignores them.
      conditions: this.conditions.map((c) => ({ ...c, status: c.status === null ? undefined : c.status })),
      events: this.events.map((e) => ({ ...e })),
    };
  }

  /** Parses the WIT `outcome` record a hook receives. */
  static fromWit(wit) {
    const out = new Outcome();
    if (wit.status != null) {
      const status = parseJson('outcome.status', wit.status);
      if (status !== null && !isObject(status)) throw new InrunError('outcome.status is not a JSON object');
      out.statusFields = status;
    }
    out.resources = (wit.resources ?? []).map((t, i) => parseJson(`outcome.resources[${i}]`, t));
    for (const [k, v] of wit.labels ?? []) out.labels.set(k, v);
    for (const [k, v] of wit.annotations ?? []) out.annotations.set(k, v);
    out.requeueNow = Boolean(wit.requeue);
    out.requeueAfterMs = wit.requeueAfterMs == null ? null : Number(wit.requeueAfterMs);
    out.cleanupAfterMs = wit.cleanup == null ? null : wit.cleanup.afterSeconds * 1000;
    for (const c of wit.conditions ?? []) out.condition(c.type, c.status ?? null, c.reason, c.message);
    for (const e of wit.events ?? []) out.event(e.reason, e.message, { warning: e.type === 'warning' });
    return out;
  }
}

// ---------------------------------------------------------------------------------------
// Exports

function asOutcome(value, what) {
  if (value instanceof Outcome) return value;
  if (value instanceof Promise) {
    throw new InrunError(`${what} returned a Promise: reconcilers and hooks must be synchronous functions`);
  }
  throw new InrunError(`${what} returned ${value === undefined ? 'nothing' : safeJson(value)}, not an Outcome`);
}

/** How many times each warm-up request is run. */
const WARM_UP_CALLS = 2;

/**
 * Runs `call` on each of `requests` (CR objects as the host sends them, or `Request`s) a
 * few times, ignoring what it answers or throws, with log lines dropped.
 *
 * componentize-js runs a module's top level when it builds the component and keeps the
 * engine's memory as the component's starting point: code a warm-up ran is already
 * compiled to bytecode in every instance, which the first call of a fresh instance would
 * otherwise do (a third of the JavaScript WebApp's fresh instance + call).
 */
function warmUp(requests, call) {
  if (requests === undefined) return;
  if (!Array.isArray(requests)) {
    throw new InrunError(`warmUp: expected an array of CR objects, got ${safeJson(requests)}`);
  }
  const wit = requests.map((r) => (r instanceof Request ? r : Request.forObject(r)).toWit());
  warming = true;
  try {
    for (const req of wit) {
      for (let i = 0; i < WARM_UP_CALLS; i++) {
        try {
          call(req);
        } catch {
          // A CR the reconciler refuses warms its error path: nothing to report.
        }
      }
    }
  } finally {
    warming = false;
  }
}

/**
 * Wraps `fn(req: Request) => Outcome` as the `reconciler` world's `reconcile` export:
 *
 *   export const reconcile = reconciler((req) => new Outcome());
 *
 * A thrown error fails the reconcile with its message (see `errorMessage`).
 *
 * `options.warmUp`: CRs (objects as the host sends them, or `Request`s) that `fn` runs on
 * once the module is loaded, which is when componentize-js builds the component: every
 * instance then starts with that code compiled (see the README, "Warm-up"). Log lines are
 * dropped and failures ignored; whatever `fn` leaves in module state is in every instance.
 */
export function reconciler(fn, options = {}) {
  const reconcile = function reconcile(req) {
    try {
      return asOutcome(fn(Request.fromWit(req)), 'reconcile').toWit();
    } catch (e) {
      throw errorMessage(e);
    }
  };
  warmUp(options?.warmUp, reconcile);
  return reconcile;
}

/**
 * Wraps named hook functions `(req: Request, current: Outcome) => Outcome` as the
 * `hooks` world's `functions` and `call` exports, in the order given:
 *
 *   export const { functions, call } = hooks({ 'add-labels': (req, current) => current });
 *
 * `options.warmUp`: CRs every hook function runs on (with an empty current outcome) once
 * the module is loaded, as for `reconciler`.
 */
export function hooks(table, options = {}) {
  const names = Object.keys(table);
  const exports = {
    functions() {
      return [...names];
    },
    call(name, req, current) {
      try {
        if (!Object.prototype.hasOwnProperty.call(table, name)) {
          throw new InrunError(`unknown hook function \`${name}\`; this plugin has: ${names.join(', ')}`);
        }
        const request = Request.fromWit(req);
        const outcome = Outcome.fromWit(current);
        return asOutcome(table[name](request, outcome), `hook \`${name}\``).toWit();
      } catch (e) {
        throw errorMessage(e);
      }
    },
  };
  const empty = new Outcome().toWit();
  for (const name of names) warmUp(options?.warmUp, (req) => exports.call(name, req, empty));
  return exports;
}
