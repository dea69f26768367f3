// Lets Node.js load inrun-sdk.js and plugins outside a component, for unit tests:
//
//   node --import ./sdk/js/testing/register.mjs --test
//
// The `inrun:reconciler/host@0.1.0` import resolves to testing/host.mjs, which prints log
// lines to stderr and records them in `logged`; `http` and `credentials` (packages) to
// testing/http.mjs and testing/credentials.mjs, which answer what a test sets.
import { register } from 'node:module';

register(new URL('./hooks.mjs', import.meta.url));
