// Types of testing/host.mjs, the stand-in for the host's `log` import under Node.js.
import type { LogLevel } from '../inrun-sdk.js';

/** Every line logged so far, as [level, message]. */
export declare const logged: [LogLevel, string][];

/** Records the line (and prints it to stderr unless INRUN_TEST_QUIET is set). */
export declare function log(level: LogLevel, message: string): void;
