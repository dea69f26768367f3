// Types of testing/credentials.mjs, the stand-in for the host's `credentials` import under
// Node.js.

/** The values a test grants: `"name/key"` → value. */
export declare const secrets: Map<string, string>;

/** The value of `"name/key"` in `secrets`; throws a string (an `err`) when absent. */
export declare function get(name: string, key: string): string;
