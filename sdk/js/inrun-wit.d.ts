// Types of the WIT imports a componentize-js guest sees (`wit/reconciler.wit`,
// `wit/0.2.0/package.wit`), as ES modules. componentize-js maps the WIT types this way: a
// `string` is a string, `u16` and `u32` are numbers, `list<u8>` is a Uint8Array, a
// `tuple<a, b>` is a two-element array, an `option<T>` is `T` or `undefined`, an `enum` is
// its case name as a string; a function returning `result<T, string>` returns `T` and
// throws for an `err` (an Error whose `payload` is the string).
//
// inrun-sdk.d.ts refers to this file, so a TypeScript plugin that imports the SDK may also
// import these modules directly, e.g. `import { get } from 'inrun:reconciler/cluster@0.1.0'`.

/** What the host offers every plugin. */
declare module 'inrun:reconciler/host@0.1.0' {
  /** Severity of a log line (the WIT `level` enum). */
  export type Level = 'trace' | 'debug' | 'info' | 'warn' | 'error';
  /** Writes a line to the host's log, tagged with the plugin's name and digest. */
  export function log(level: Level, message: string): void;
}

/**
 * Reads of Kubernetes objects from the host's watch cache, for a plugin the Blueprint grants
 * `capabilities.cluster.read`. Without a grant for the kind (and namespace) a call throws
 * (the `err` text as the error's `payload`).
 */
declare module 'inrun:reconciler/cluster@0.1.0' {
  /**
   * The object `name` of `kind` in `apiVersion` as JSON text, or `undefined` when it does
   * not exist. `namespace` `undefined`: the CR's own namespace (the only choice for a kind
   * granted as cluster-scoped).
   */
  export function get(
    apiVersion: string,
    kind: string,
    namespace: string | undefined,
    name: string,
  ): string | undefined;
  /**
   * Every object of `kind` in `apiVersion`, each as JSON text, in no particular order.
   * `namespace` `undefined`: the CR's own namespace (or the whole cluster for a kind granted
   * as cluster-scoped); `'*'`: every namespace, when the grant allows it. `labelSelector`:
   * equality terms only (`app=web,tier=front`).
   */
  export function list(
    apiVersion: string,
    kind: string,
    namespace: string | undefined,
    labelSelector: string | undefined,
  ): string[];
}

/**
 * Outbound HTTP, for a plugin the Blueprint grants `capabilities.http` (or a package,
 * `package.capabilities.http`): only hosts the grant lists; anything else, a timeout or a
 * response over the grant's cap throws. Redirects are not followed.
 */
declare module 'inrun:reconciler/http@0.1.0' {
  /** The WIT `http.request` record. */
  export interface Request {
    /** e.g. `GET`. */
    method: string;
    /** An absolute `http://` or `https://` URL, without user name or password. */
    url: string;
    /** Names and values; `host`, `content-length`, `transfer-encoding` and `connection` are refused. */
    headers: [string, string][];
    /** The body, if any. */
    body?: Uint8Array | undefined;
  }
  /** The WIT `http.response` record. */
  export interface Response {
    /** The status code, e.g. 200. */
    status: number;
    /** Names (lowercase) and values, in the order received. */
    headers: [string, string][];
    /** The whole body. */
    body: Uint8Array;
  }
  /** Sends `req` and waits for the whole response. */
  export function fetch(req: Request): Response;
}

/**
 * A package's credentials (the `package` world of `wit/0.2.0`): keys of the Secrets the
 * Blueprint grants, in the CR's namespace.
 */
declare module 'inrun:reconciler/credentials@0.2.0' {
  /** The value of `key` in the Secret `name`; throws why not (never the value). */
  export function get(name: string, key: string): string;
}
