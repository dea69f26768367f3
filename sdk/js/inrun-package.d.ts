// Types of inrun-package.js: infrastructure packages (the `package` world of `wit/0.2.0`)
// in TypeScript.
//
//   import { packageExports, Workflow, type Options } from './node_modules/inrun-sdk/inrun-package.js';
//   const exported = packageExports({
//     identity: (opts: Options) => ({ boundary: 'local', profile: opts.profile, state: [opts.profile] }),
//     observe: () => ({ exists: false, matches: false, ready: false }),
//     converge: () => Workflow.completed(),
//     delete: () => Workflow.completed(),
//   });
//   export const { validate, identity, observe, converge } = exported;
//   const remove = exported.delete;
//   export { remove as delete };
//
// Written by hand against inrun-package.js; sdk/js/test/types.test.ts checks the two agree.

import { InrunError, type JsonObject, type JsonValue } from './inrun-sdk.js';

export { InrunError };

// ---------------------------------------------------------------------------------------
// Options

/** What woke the CR (the WIT `event` enum). */
export type PackageEvent = 'changed' | 'interval' | 'requested' | 'retry' | 'deleting';

/** The CR's type, as the Blueprint declares it (the WIT `descriptor` record). */
export interface Descriptor {
  group: string;
  version: string;
  plural: string;
  kind: string;
}

/** The WIT `options` record every call receives (`config` is JSON text). */
export interface WitOptions {
  config: string;
  profile: string;
  state: string;
  event: PackageEvent;
  resource: Descriptor;
  namespace?: string | undefined;
  name: string;
}

/** What every call receives, parsed from the WIT `options` record. */
export declare class Options {
  /** Throws when `config` is not a JSON object. */
  constructor(wit: WitOptions);
  /** `spec.config` of the CR, as an object. */
  config: JsonObject;
  /** `spec.config.profile` when set, else `<namespace>--<name>`. */
  profile: string;
  /** `spec.state` (default `running`). */
  state: string;
  /** What woke the CR. */
  event: PackageEvent;
  /** The CR's type. */
  resource: Descriptor;
  /** The CR's namespace; `null` for a cluster-scoped CR. */
  namespace: string | null;
  /** The CR's name. */
  name: string;
}

// ---------------------------------------------------------------------------------------
// Answers

/** Who owns the thing and which thing it is. */
export interface Identity {
  /** The backend boundary, e.g. an account or region. */
  boundary: string;
  /** The credentials profile the package acts with. */
  profile: string;
  /** What identifies the thing within the boundary; the host hashes it (each entry or its absence). */
  state: (string | null | undefined)[];
}

/** What `observe` saw. */
export interface Observation {
  exists: boolean;
  matches: boolean;
  ready: boolean;
}

/** How a `converge` or `delete` went (the WIT `progress` enum). */
export type Progress = 'completed' | 'pending' | 'failed';

/** A workflow outcome; `detail` reaches only the host's log. */
export interface Workflow {
  progress: Progress;
  detail?: string;
}

/** How a `converge` or `delete` went; `detail` reaches only the host's log. */
export declare const Workflow: {
  /** Done: the host observes again. */
  completed(detail?: string | null): Workflow;
  /** Started, still running on the backend: observed again after the retry delay. */
  pending(detail?: string | null): Workflow;
  /** Did not work: retried with backoff. */
  failed(detail?: string | null): Workflow;
};

// ---------------------------------------------------------------------------------------
// What the host grants

/** A header: name and value. */
export type Header = [name: string, value: string];

/** What `fetch` sends besides the method and URL. */
export interface FetchOptions {
  headers?: Header[];
  /** Text (sent as UTF-8) or bytes. */
  body?: string | Uint8Array;
}

/** What the server answered. */
export interface FetchResponse {
  status: number;
  /** Names (lowercase) and values, in the order received. */
  headers: Header[];
  body: Uint8Array;
  /** The body as UTF-8 text. */
  text(): string;
  /** The body parsed as JSON; throws when it is not JSON. */
  json(): JsonValue;
}

/**
 * An HTTP request through the host, only to hosts the Blueprint grants
 * (`package.capabilities.http`); throws an `InrunError` when the host refuses or the
 * request fails.
 */
export declare function fetch(method: string, url: string, options?: FetchOptions): FetchResponse;

/**
 * The value of `key` in the Secret `name` of the CR's namespace, when the Blueprint grants
 * it (`package.capabilities.credentials`); throws an `InrunError` saying why not.
 */
export declare function credential(name: string, key: string): string;

// ---------------------------------------------------------------------------------------
// Exports

/** A package: each function synchronous, each call idempotent; a thrown error fails that step. */
export interface Package {
  /** Problems with the options (none: valid); every options are valid when left out. */
  validate?(opts: Options): string[] | null | undefined;
  identity(opts: Options): Identity;
  observe(opts: Options): Observation;
  converge(opts: Options): Workflow;
  delete(opts: Options): Workflow;
}

/** The WIT `identity` record (`state` entries `undefined` for absent). */
export interface WitIdentity {
  boundary: string;
  profile: string;
  state: (string | undefined)[];
}

/**
 * The `package` world's exports. Each but `validate` throws the message of a failure (the
 * `err`); `validate` answers problems, among them options it cannot parse.
 */
export interface PackageExports {
  validate(opts: WitOptions): string[];
  identity(opts: WitOptions): WitIdentity;
  observe(opts: WitOptions): Observation;
  converge(opts: WitOptions): Workflow;
  delete(opts: WitOptions): Workflow;
}

/**
 * The `package` world's exports from `impl`; throws an `InrunError` when one of
 * `identity`, `observe`, `converge` and `delete` is not a function.
 */
export declare function packageExports(impl: Package): PackageExports;
