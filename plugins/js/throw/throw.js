// Test guest: a bug that throws. The SDK turns the exception into this call's error
// ("TypeError: ..."); the host fails only this reconcile.
import { reconciler, log } from '../../../sdk/js/inrun-sdk.js';

export const reconcile = reconciler((req) => {
  log.warn(`about to throw for ${req.key}`);
  throw new RangeError(`inrun_test_throw_js threw on purpose for ${req.key}`);
});
