#!/usr/bin/env node
// `inrun-componentize`: componentize-js's command line, with cheaper strings.
//
//   node node_modules/inrun-sdk/componentize.mjs app.js --wit <dir> --world-name reconciler \
//     --disable http fetch-event --out app.wasm
//
// Takes exactly componentize-js's arguments and builds the same component, but for one
// function of the JavaScript glue componentize-js generates for the WIT world: the one that
// copies a string the guest hands to the host (every resource, status and label of an
// outcome, every log line) into linear memory. componentize-js 0.23 first measures the
// string's UTF-8 length with a loop over its characters in JavaScript, which StarlingMonkey
// interprets: about 0.13 µs a character, ~100 µs of a WebApp's 0.35 ms reconcile. Here the
// engine's own `TextEncoder` measures and encodes it, and the bytes are copied in one go:
// the same bytes, in one allocation of the exact length, as before.
//
// componentize-js is found in a `node_modules` above the working directory or above this
// file, or where `INRUN_COMPONENTIZE_JS` points (its package directory).

import { existsSync, realpathSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

/** The generated function replaced, and what replaces it. */
const ENCODE = 'function _utf8AllocateAndEncode(s, realloc, memory) {';
const NATIVE_ENCODE = `${ENCODE}
  if (typeof s !== 'string') {
    throw new TypeError('expected a string, received [' + typeof s + ']');
  }
  if (s.length === 0) { return { ptr: 1, len: 0 }; }
  const bytes = TEXT_ENCODER_UTF8.encode(s);
  const len = bytes.length;
  const ptr = realloc(0, 0, 1, len);
  new Uint8Array(memory.buffer, ptr, len).set(bytes);
  return { ptr, len };
}
`;

/**
 * The glue with its string encoder replaced by the native one. Glue without the function
 * (a world that hands no string over) is returned as it is; glue whose function does not
 * end where expected (a componentize-js this was not written for) is an error, never a
 * half-replaced function.
 */
export function nativeStrings(glue) {
  const start = glue.indexOf(ENCODE);
  if (start < 0) return glue;
  const end = glue.indexOf('\n}\n', start);
  const body = end < 0 ? '' : glue.slice(start, end);
  if (!body.includes('TEXT_ENCODER_UTF8.encodeInto') || !glue.includes('const TEXT_ENCODER_UTF8 =')) {
    throw new Error(
      'inrun-componentize: this componentize-js generates a string encoder it does not know; ' +
        'build with componentize-js 0.23 or run its own cli.js',
    );
  }
  return glue.slice(0, start) + NATIVE_ENCODE + glue.slice(end + 3);
}

/** componentize-js's package directory. */
function findComponentizeJs() {
  const given = process.env.INRUN_COMPONENTIZE_JS;
  if (given) return resolve(given);
  for (const from of [process.cwd(), dirname(fileURLToPath(import.meta.url))]) {
    for (let dir = resolve(from); ; dir = dirname(dir)) {
      const pkg = join(dir, 'node_modules', '@bytecodealliance', 'componentize-js');
      if (existsSync(join(pkg, 'package.json'))) return pkg;
      if (dirname(dir) === dir) break;
    }
  }
  throw new Error(
    'inrun-componentize: @bytecodealliance/componentize-js is not installed ' +
      '(npm install it, or set INRUN_COMPONENTIZE_JS to its package directory)',
  );
}

/** Runs componentize-js's command line with the glue made by `nativeStrings`. */
async function main() {
  const pkg = findComponentizeJs();
  const file = (path) => pathToFileURL(join(pkg, path)).href;
  const { splicer } = await import(file('lib/spidermonkey-embedding-splicer.js'));
  const splice = splicer.spliceBindings;
  splicer.spliceBindings = (...args) => {
    const spliced = splice(...args);
    spliced.jsBindings = nativeStrings(spliced.jsBindings);
    return spliced;
  };
  await import(file('src/cli.js'));
}

// Run as a program (also through npm's `bin` link), not when imported by a test.
if (process.argv[1] && realpathSync(process.argv[1]) === realpathSync(fileURLToPath(import.meta.url))) {
  main().catch((e) => {
    console.error(e.message);
    process.exit(1);
  });
}
