// Unit tests of app.ts under Node.js: `npm test` (after ./build.sh has run `npm install`)
// compiles src/ into dist/ with tsconfig.test.json and runs dist/app.test.js.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import { Request, InrunError, type JsonValue } from 'inrun-sdk';
import { decide } from './app.js';

const request = (spec: JsonValue): Request =>
  Request.forObject({
    apiVersion: 'example.inrun.dev/v1alpha1',
    kind: '@KIND@',
    metadata: { name: 'sample', namespace: 'default' },
    spec,
  });

test('the message becomes a ConfigMap and the status', () => {
  const wit = decide(request({ message: 'hi' })).toWit();
  assert.equal(wit.resources.length, 1);
  const cm = JSON.parse(wit.resources[0] ?? '{}');
  assert.equal(cm.kind, 'ConfigMap');
  assert.equal(cm.data.message, 'hi');
  assert.equal(JSON.parse(wit.status ?? '{}').message, 'hi');
});

test('a message that is not text is refused', () => {
  assert.throws(() => decide(request({ message: 3 })), InrunError);
});
