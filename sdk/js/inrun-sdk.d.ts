// Types of inrun-sdk.js, for plugins written in TypeScript (compiled to JavaScript, then
// built into a component with componentize-js like any JavaScript plugin).
//
//   import { reconciler, Outcome, type Request } from './node_modules/inrun-sdk/inrun-sdk.js';
//   export const reconcile = reconciler((req: Request) => new Outcome().status('seen', req.name));
//
// Written by hand against inrun-sdk.js; sdk/js/test/types.test.ts uses every export under
// `strict` and runs against the JavaScript, so the two cannot drift apart unnoticed.

/// <reference path="./inrun-wit.d.ts" />

// ---------------------------------------------------------------------------------------
// JSON

/** A JSON value as `JSON.parse` returns it. */
export type JsonValue = null | boolean | number | string | JsonValue[] | JsonObject;

/** A JSON object as `JSON.parse` returns it. */
export interface JsonObject {
  [key: string]: JsonValue;
}

// ---------------------------------------------------------------------------------------
// Logging

/** A log level, by name. */
export type LogLevel = 'trace' | 'debug' | 'info' | 'warn' | 'error';

/** The host's log (see `log`). */
export interface Log {
  /** Writes `message` at `level`. */
  log(level: LogLevel, message: string): void;
  /** Writes the parts, joined with spaces (objects as JSON, errors as `Name: message`). */
  trace(...parts: unknown[]): void;
  /** As `trace`, at `debug`. */
  debug(...parts: unknown[]): void;
  /** As `trace`, at `info`. */
  info(...parts: unknown[]): void;
  /** As `trace`, at `warn`. */
  warn(...parts: unknown[]): void;
  /** As `trace`, at `error`. */
  error(...parts: unknown[]): void;
}

/**
 * The host's log: each line is tagged with the plugin's name and digest. Several
 * arguments are joined with spaces; objects are written as JSON.
 */
export declare const log: Log;

// ---------------------------------------------------------------------------------------
// Errors

/**
 * An error whose message is the whole answer: the call fails with exactly this text.
 * Throwing a plain `Error` does the same; other error types (a `TypeError` from a bug)
 * fail the call with their name in front (`TypeError: x is undefined`).
 */
export declare class InrunError extends Error {
  constructor(message: string);
}

/** The message a thrown value fails the call with. */
export declare function errorMessage(e: unknown): string;

// ---------------------------------------------------------------------------------------
// Type checks with the same messages the Rust SDK's serde gives

/** What each type name of `check` accepts, and the type it returns. */
export interface CheckTypes {
  string: string;
  boolean: boolean;
  /** Any number (`f64`). */
  number: number;
  /** A whole number (`i64`). */
  integer: number;
  /** A whole number from 0 to 255. */
  u8: number;
  /** A whole number from 0 to 65535. */
  u16: number;
  /** A whole number from 0 to 4294967295. */
  u32: number;
  /** A whole number from 0 to `Number.MAX_SAFE_INTEGER`. */
  u64: number;
  /** A JSON object (not null, not an array). */
  object: JsonObject;
  array: JsonValue[];
  /** A JSON object whose values are all strings. */
  'map<string>': { [key: string]: string };
}

/** A type name `check` knows. */
export type CheckType = keyof CheckTypes;

/** A check of your own: returns the value (as it should be typed) or throws. */
export type Checker<T> = (value: unknown, path: string) => T;

/**
 * Checks that `value` has `type` and returns it, or throws `<path>: invalid type: ...`
 * (an `InrunError`). A `Checker` is called with `value` and `path`.
 */
export declare function check<K extends CheckType>(value: unknown, type: K, path: string): CheckTypes[K];
export declare function check<T>(value: unknown, type: Checker<T>, path: string): T;

/** The error `<path>: invalid type: <what value is>, expected <expected>`. */
export declare function invalidType(path: string, value: unknown, expected: string): InrunError;

/** True for a JSON object (not null, not an array). */
export declare function isObject(value: unknown): value is JsonObject;

// ---------------------------------------------------------------------------------------
// Request

/** The CR's observed children: by kind, then name, each object as the host read it. */
export interface Children {
  [kind: string]: { [name: string]: JsonObject };
}

/** The WIT `request` record (its `object`, `args` and `children` are JSON text). */
export interface WitRequest {
  key: string;
  apiVersion: string;
  kind: string;
  object: string;
  args: string;
  finalizing: boolean;
  target?: string | undefined;
  children?: string | undefined;
}

/** The fields `new Request(...)` takes; each has a default. */
export interface RequestFields {
  key?: string;
  apiVersion?: string;
  kind?: string;
  object?: JsonObject;
  args?: JsonObject;
  finalizing?: boolean;
  target?: string | null;
  children?: Children | null;
}

/** What the host asks about one CR; `object`, `args` and `children` are parsed JSON. */
export declare class Request {
  constructor(fields?: RequestFields);
  /** "namespace/name", or "name" for a cluster-scoped CR. */
  key: string;
  apiVersion: string;
  kind: string;
  /** The CR, minus the Blueprint's `request.object.exclude` paths. */
  object: JsonObject;
  /** The rendered `reconcile.args` (`{}` when none are declared). */
  args: JsonObject;
  /** True while the CR is being deleted: writes are ignored, a requeue holds deletion. */
  finalizing: boolean;
  /** The serve target the CR came through, or null. */
  target: string | null;
  /** The observed children (by kind, then name) when `request.children` is set, or null. */
  children: Children | null;

  /** Parses the WIT `request` record (JSON text fields); throws on invalid JSON. */
  static fromWit(req: WitRequest): Request;
  /** A request for `object` as the host would build it (for unit tests). */
  static forObject(object: JsonObject, args?: JsonObject): Request;
  /** The WIT `request` record (for unit tests that call an export directly). */
  toWit(): WitRequest;

  /** `metadata.name`, or the name part of the key. */
  get name(): string;
  /** `metadata.namespace`, or the namespace part of the key; null when cluster-scoped. */
  get namespace(): string | null;
  /** The CR's `spec`, or null when it has none. */
  get spec(): JsonValue;

  /** `args[name]`; throws `args.<name> is required` when absent or null. */
  arg(name: string): Exclude<JsonValue, null>;
  /** `args[name]` checked against `type`; throws `args.<name> is required` when absent or null. */
  arg<K extends CheckType>(name: string, type: K): CheckTypes[K];
  arg<T>(name: string, type: Checker<T>): T;
  /** `args[name]`, or null when absent or null. */
  optionalArg(name: string): Exclude<JsonValue, null> | null;
  /** `args[name]` checked against `type`, or null when absent or null. */
  optionalArg<K extends CheckType>(name: string, type: K): CheckTypes[K] | null;
  optionalArg<T>(name: string, type: Checker<T>): T | null;
}

// ---------------------------------------------------------------------------------------
// Outcome

/** A condition of the reconciler's on the CR; `status` null is Unknown. */
export interface Condition {
  type: string;
  status: boolean | null;
  reason: string;
  message: string;
}

/** How an event is shown. */
export type EventType = 'normal' | 'warning';

/** An event to record on the CR. */
export interface Event {
  type: EventType;
  reason: string;
  message: string;
}

/** The WIT `condition` record of `wit/0.2.0` (`status` undefined is Unknown). */
export interface WitCondition {
  type: string;
  status?: boolean | undefined;
  reason: string;
  message: string;
}

/**
 * The WIT `outcome` record: JSON text (keys as set; the host sorts them when it reads the
 * outcome), sorted pairs, a BigInt for the u64. `conditions`
 * and `events` are those of `wit/0.2.0`; a 0.1.0 world's record has neither.
 */
export interface WitOutcome {
  status: string | undefined;
  resources: string[];
  labels: [string, string][];
  annotations: [string, string][];
  requeue: boolean;
  requeueAfterMs: bigint | undefined;
  cleanup: { afterSeconds: number } | undefined;
  conditions: WitCondition[];
  events: Event[];
}

/**
 * What a reconciler declares the CR should become. Every builder method returns the
 * outcome, so calls chain. Durations are milliseconds.
 */
export declare class Outcome {
  constructor();
  /** Merged into the CR's status (the outcome wins over `emit.status`); null for none. */
  statusFields: { [key: string]: unknown } | null;
  /** Objects to apply: full objects or intents `{type, fields}`. */
  resources: object[];
  /** Labels for the CR (written sorted by key). */
  labels: Map<string, string>;
  /** Annotations for the CR (written sorted by key). */
  annotations: Map<string, string>;
  requeueNow: boolean;
  /** Milliseconds, or null. */
  requeueAfterMs: number | null;
  /** Milliseconds, or null; crosses as whole seconds rounded up. */
  cleanupAfterMs: number | null;
  /** Conditions for the CR. */
  conditions: Condition[];
  /** Events for the CR. */
  events: Event[];

  /**
   * Sets a condition on the CR: `status` true, false or null (Unknown). Merged by type with
   * those already there; `Ready` and `Reconciled` are the host's. Reaches the CR from a
   * component built against `wit/0.2.0`.
   */
  condition(type: string, status: boolean | null, reason?: string, message?: string): this;
  /** Asks for an event on the CR (`{ warning: true }` for a Warning); rate-limited by the host. */
  event(reason: string, message?: string, options?: { warning?: boolean }): this;
  /** Adds a full Kubernetes object to apply. */
  resource(object: object): this;
  /** Adds an object in intent form: `{"type": type, "fields": fields}`. */
  intent(type: string, fields: object): this;
  /** Sets `status[key] = value`. */
  status(key: string, value: unknown): this;
  /** Merges every key of `fields` into the status (later keys win). */
  status(fields: object): this;
  /** Merges every key of `fields` into the status (later keys win). */
  statusObject(fields: object): this;
  /** Sets a label on the CR. `inrun.dev/` keys are reserved for the host. */
  label(key: string, value: string): this;
  /** Sets an annotation on the CR. */
  annotation(key: string, value: string): this;
  /** Reconcile again soon (after the host's default delay). */
  requeue(): this;
  /** Reconcile again after `ms` milliseconds; throws for a negative or non-finite number. */
  requeueAfter(ms: number | bigint): this;
  /** Delete the CR itself after `ms` milliseconds (rounded up to whole seconds). */
  cleanupAfter(ms: number | bigint): this;
  /** True when the outcome writes nothing (a requeue alone is still empty). */
  isEmpty(): boolean;
  /** The WIT `outcome` record; throws when a resource is not JSON. */
  toWit(): WitOutcome;
  /** Parses the WIT `outcome` record a hook receives (of either contract version). */
  static fromWit(wit: Partial<WitOutcome>): Outcome;
}

/**
 * JSON text with object keys sorted at every level, as the host reads an outcome; `undefined`
 * for a value JSON cannot write (`undefined`, a function, a symbol), so a type that may
 * hold `undefined` (or `unknown`) gives `string | undefined`.
 */
export declare function canonicalJson<T>(value: T): undefined extends T ? string | undefined : string;

// ---------------------------------------------------------------------------------------
// Exports

/** A reconcile function: synchronous, returns an `Outcome` or throws. */
export type ReconcileFunction = (req: Request) => Outcome;

/** A hook function: synchronous, returns the new `Outcome` (often `current`) or throws. */
export type HookFunction = (req: Request, current: Outcome) => Outcome;

/**
 * The `reconciler` world's `reconcile` export. A thrown error fails the reconcile: it
 * throws the message (see `errorMessage`), which componentize-js returns as the `err`.
 */
export type ReconcileExport = (req: WitRequest) => WitOutcome;

/** The `hooks` world's exports. */
export interface HooksExports {
  /** The hook names, in the order given. */
  functions(): string[];
  /** Runs hook `name`; throws the message of a failure (the `err`), or for an unknown name. */
  call(name: string, req: WitRequest, current: Partial<WitOutcome>): WitOutcome;
}

/** Options of `reconciler` and `hooks`. */
export interface WrapOptions {
  /**
   * CRs (objects as the host sends them, or `Request`s) the wrapped functions run on when
   * the module is loaded, which is when componentize-js builds the component: every
   * instance then starts with that code compiled. Log lines are dropped and failures
   * ignored; whatever the functions leave in module state is in every instance.
   */
  warmUp?: ReadonlyArray<JsonObject | Request>;
}

/**
 * Wraps `fn` as the `reconciler` world's `reconcile` export:
 *
 *   export const reconcile = reconciler((req) => new Outcome(), { warmUp: [sampleCr] });
 */
export declare function reconciler(fn: ReconcileFunction, options?: WrapOptions): ReconcileExport;

/**
 * Wraps named hook functions as the `hooks` world's `functions` and `call` exports, in
 * the order given:
 *
 *   export const { functions, call } = hooks({ 'add-labels': (req, current) => current });
 */
export declare function hooks(table: { [name: string]: HookFunction }, options?: WrapOptions): HooksExports;
