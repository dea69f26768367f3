// inrun-componentize's rewrite of componentize-js's string encoder: the same bytes in one
// allocation of the exact length, without a JavaScript loop over the characters; and, when
// INRUN_COMPONENTIZE_JS names the pinned componentize-js, that its real glue is rewritten.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

import { nativeStrings } from '../componentize.mjs';

// A stand-in written here with the generated encoder's shape: measure the UTF-8 length
// character by character, allocate it, encode into it.
const MEASURING = `const TEXT_ENCODER_UTF8 = new TextEncoder();
function _utf8AllocateAndEncode(s, realloc, memory) {
  if (typeof s !== 'string') {
    throw new TypeError('expected a string, received [' + typeof s + ']');
  }
  if (s.length === 0) { return { ptr: 1, len: 0 }; }
  let len = 0;
  for (let i = 0; i < s.length; i++) {
    const ch = s.charCodeAt(i);
    if (ch < 0x80) { len += 1; }
    else if (ch < 0x800) { len += 2; }
    else if (ch >= 0xd800 && ch <= 0xdbff && i + 1 < s.length && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) { len += 4; i++; }
    else { len += 3; }
  }
  const ptr = realloc(0, 0, 1, len);
  const { read, written } = TEXT_ENCODER_UTF8.encodeInto(s, new Uint8Array(memory.buffer, ptr, len));
  if (read !== s.length || written !== len) throw new Error('failed to encode whole string');
  return { ptr, len };
}
`;

/** The glue's encoder as a function of (s, realloc, memory). */
function encoderOf(glue) {
  return new Function(`${glue}\nreturn _utf8AllocateAndEncode;`)();
}

/** Encodes `s` with `encode` into a fresh memory: the bytes and every allocation asked. */
function run(encode, s) {
  const memory = { buffer: new ArrayBuffer(1 << 16) };
  const asked = [];
  const realloc = (old, oldLen, align, len) => {
    asked.push([old, oldLen, align, len]);
    return 64;
  };
  const { ptr, len } = encode(s, realloc, memory);
  return { bytes: [...new Uint8Array(memory.buffer, ptr, len)], ptr, len, asked };
}

const STRINGS = [
  '',
  'plain ascii {"kind":"Deployment"}',
  'héllo wörld',
  '漢字',
  '😀 an astral character',
  'a lone \ud800 surrogate and a lone \udc00 one',
  'x'.repeat(5000),
];

test('the rewritten encoder writes the same bytes in the same single allocation', () => {
  const before = encoderOf(MEASURING);
  const rewritten = nativeStrings(MEASURING);
  assert.doesNotMatch(rewritten, /charCodeAt/, 'the per-character loop is gone');
  const after = encoderOf(rewritten);
  for (const s of STRINGS) {
    assert.deepEqual(run(after, s), run(before, s), JSON.stringify(s.slice(0, 40)));
  }
  assert.throws(() => run(after, 7), /expected a string, received \[number\]/);
});

test('glue without the encoder is left as it is; an encoder of another shape is refused', () => {
  const none = 'const TEXT_ENCODER_UTF8 = new TextEncoder();\nfunction other() {}\n';
  assert.equal(nativeStrings(none), none);
  const unknown = MEASURING.replace('TEXT_ENCODER_UTF8.encodeInto', 'someOtherEncoder');
  assert.throws(() => nativeStrings(unknown), /does not know/);
});

test('the pinned componentize-js glue is rewritten', { skip: !process.env.INRUN_COMPONENTIZE_JS }, async () => {
  const pkg = process.env.INRUN_COMPONENTIZE_JS;
  const { splicer } = await import(pathToFileURL(join(pkg, 'lib/spidermonkey-embedding-splicer.js')).href);
  const wit = new URL('../../../wit', import.meta.url).pathname;
  const { jsBindings } = splicer.spliceBindings(
    readFileSync(join(pkg, 'lib/starlingmonkey_embedding.wasm')),
    ['stdio', 'random', 'clocks'],
    undefined,
    wit,
    'reconciler',
    false,
  );
  assert.match(jsBindings, /function _utf8AllocateAndEncode\(/);
  // The generated encoder also returns `codepoints`; no caller reads it.
  assert.doesNotMatch(jsBindings.replace(/function _utf8AllocateAndEncode[\s\S]*?\n\}\n/, ''), /\.codepoints/);
  const rewritten = nativeStrings(jsBindings);
  const start = rewritten.indexOf('function _utf8AllocateAndEncode(');
  const encoder = rewritten.slice(start, rewritten.indexOf('\n}\n', start));
  assert.match(encoder, /TEXT_ENCODER_UTF8\.encode\(s\)/);
  assert.doesNotMatch(encoder, /charCodeAt/);
  assert.equal(rewritten.length - jsBindings.length < 0, true, 'shorter: only the loop went');
});
