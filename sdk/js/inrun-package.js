// Inrun SDK for JavaScript: infrastructure packages, the `package` world of
// `wit/0.2.0` (`inrun:reconciler@0.2.0`), built with componentize-js.
//
// A package stands for something outside Kubernetes (a database, a bucket, a DNS zone).
// The host calls `validate`, `identity` and `observe`, and `converge` or `delete` only
// when what it observes calls for it. Every call receives the same `Options`; each must
// be idempotent. A package reaches its backend with `fetch` (hosts the Blueprint grants)
// and the credentials `credential` reads (keys of Secrets the Blueprint grants, in the
// CR's namespace); it sees no environment. A thrown error fails that step: its message
// reaches only the host's log, and the CR shows a generic reason.
//
//   import { packageExports, Workflow, fetch } from './inrun-package.js';
//   const exported = packageExports({
//     identity: (opts) => ({ boundary: opts.config.endpoint, profile: opts.profile, state: [opts.profile] }),
//     observe: (opts) => ({ exists: false, matches: false, ready: false }),
//     converge: (opts) => Workflow.completed(),
//     delete: (opts) => Workflow.completed(),
//   });
//   export const { validate, identity, observe, converge } = exported;
//   const remove = exported.delete;
//   export { remove as delete }; // `delete` is a keyword: it cannot name a binding

import { fetch as hostFetch } from 'inrun:reconciler/http@0.1.0';
import { get as hostCredential } from 'inrun:reconciler/credentials@0.2.0';
import { errorMessage, InrunError, isObject } from './inrun-sdk.js';

export { InrunError };

// ---------------------------------------------------------------------------------------
// Options

/** What every call receives, parsed from the WIT `options` record. */
export class Options {
  constructor(wit) {
    let config;
    try {
      config = JSON.parse(wit.config);
    } catch (e) {
      throw new InrunError(`options.config is not valid JSON: ${e.message}`);
    }
    if (!isObject(config)) throw new InrunError('options.config is not a JSON object');
    /** `spec.config` of the CR, as an object. */
    this.config = config;
    /** `spec.config.profile` when set, else `<namespace>--<name>`. */
    this.profile = wit.profile;
    /** `spec.state` (default `running`). */
    this.state = wit.state;
    /** What woke the CR: `changed`, `interval`, `requested`, `retry` or `deleting`. */
    this.event = wit.event;
    /** The CR's type: `{group, version, plural, kind}`. */
    this.resource = { ...wit.resource };
    /** The CR's namespace; `null` for a cluster-scoped CR. */
    this.namespace = wit.namespace ?? null;
    /** The CR's name. */
    this.name = wit.name;
  }
}

// ---------------------------------------------------------------------------------------
// Answers

/** How a `converge` or `delete` went; `detail` reaches only the host's log. */
export const Workflow = {
  /** Done: the host observes again. */
  completed: (detail) => workflow('completed', detail),
  /** Started, still running on the backend: observed again after the retry delay. */
  pending: (detail) => workflow('pending', detail),
  /** Did not work: retried with backoff. */
  failed: (detail) => workflow('failed', detail),
};

function workflow(progress, detail) {
  return detail === undefined || detail === null
    ? { progress }
    : { progress, detail: String(detail) };
}

function toIdentity(id) {
  if (!isObject(id)) throw new InrunError('identity must return {boundary, profile, state}');
  const { boundary, profile, state } = id;
  if (typeof boundary !== 'string') throw new InrunError('identity.boundary must be a string');
  if (typeof profile !== 'string') throw new InrunError('identity.profile must be a string');
  if (!Array.isArray(state)) throw new InrunError('identity.state must be an array');
  return {
    boundary,
    profile,
    state: state.map((s, i) => {
      if (s === null || s === undefined) return undefined;
      if (typeof s !== 'string') {
        throw new InrunError(`identity.state[${i}] must be a string, null or undefined`);
      }
      return s;
    }),
  };
}

function toObservation(seen) {
  if (!isObject(seen)) throw new InrunError('observe must return {exists, matches, ready}');
  return { exists: !!seen.exists, matches: !!seen.matches, ready: !!seen.ready };
}

function toWorkflow(w, what) {
  const progress = isObject(w) ? w.progress : undefined;
  if (!['completed', 'pending', 'failed'].includes(progress)) {
    throw new InrunError(`${what} must return a Workflow (Workflow.completed(), .pending() or .failed())`);
  }
  return workflow(progress, w.detail);
}

// ---------------------------------------------------------------------------------------
// What the host grants

/**
 * An HTTP request through the host, only to hosts the Blueprint grants
 * (`package.capabilities.http`). Returns `{status, headers, body, text(), json()}`;
 * throws when the host refuses or the request fails.
 */
export function fetch(method, url, { headers = [], body } = {}) {
  const encoded = typeof body === 'string' ? new TextEncoder().encode(body) : body;
  let answer;
  try {
    answer = hostFetch({ method, url, headers, body: encoded ?? undefined });
  } catch (e) {
    throw new InrunError(hostError(e));
  }
  const bytes = Uint8Array.from(answer.body ?? []);
  return {
    status: answer.status,
    headers: answer.headers,
    body: bytes,
    text: () => new TextDecoder().decode(bytes),
    json: () => JSON.parse(new TextDecoder().decode(bytes)),
  };
}

/**
 * The value of `key` in the Secret `name` of the CR's namespace, when the Blueprint grants
 * it (`package.capabilities.credentials`). Throws why not (never the value). Keep it out
 * of what the package returns: errors and details reach the host's log.
 */
export function credential(name, key) {
  try {
    return hostCredential(name, key);
  } catch (e) {
    throw new InrunError(hostError(e));
  }
}

/** The text of an `err` an import returned (componentize-js throws it, wrapped or not). */
function hostError(e) {
  if (typeof e === 'string') return e;
  if (e && typeof e.payload === 'string') return e.payload;
  return errorMessage(e);
}

// ---------------------------------------------------------------------------------------
// Exports

function guarded(what, run) {
  try {
    return run();
  } catch (e) {
    throw errorMessage(e);
  }
}

/**
 * The `package` world's exports from `impl`, an object with `identity`, `observe`,
 * `converge` and `delete` (each `(opts: Options) => answer`) and optionally `validate`
 * (`(opts) => [problem, ...]`, every options accepted when left out). A thrown error fails
 * that step with its message; `validate`'s problems reach only the host's log.
 */
export function packageExports(impl) {
  for (const name of ['identity', 'observe', 'converge', 'delete']) {
    if (typeof impl?.[name] !== 'function') {
      throw new InrunError(`packageExports: ${name} must be a function`);
    }
  }
  const call = (what, wit, answer) =>
    guarded(what, () => {
      const out = impl[what](new Options(wit));
      if (out instanceof Promise) {
        throw new InrunError(`${what} returned a Promise: package calls must be synchronous`);
      }
      return answer(out);
    });
  return {
    validate: (wit) => {
      let opts;
      try {
        opts = new Options(wit);
      } catch (e) {
        return [errorMessage(e)];
      }
      if (typeof impl.validate !== 'function') return [];
      return guarded('validate', () => {
        const problems = impl.validate(opts) ?? [];
        if (!Array.isArray(problems)) throw new InrunError('validate must return an array of problems');
        return problems.map(String);
      });
    },
    identity: (wit) => call('identity', wit, toIdentity),
    observe: (wit) => call('observe', wit, toObservation),
    converge: (wit) => call('converge', wit, (w) => toWorkflow(w, 'converge')),
    delete: (wit) => call('delete', wit, (w) => toWorkflow(w, 'delete')),
  };
}
