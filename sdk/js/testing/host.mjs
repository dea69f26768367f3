// Stand-in for the host's `log` import when a plugin runs under Node.js.

/** Every line logged so far, as [level, message]. */
export const logged = [];

export function log(level, message) {
  logged.push([level, message]);
  if (!process.env.INRUN_TEST_QUIET) console.error(`[${level}] ${message}`);
}
