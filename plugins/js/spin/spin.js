// Test guest: an endless loop. The host's deadline interrupts it; the next call works.
import { reconciler } from '../../../sdk/js/inrun-sdk.js';

export const reconcile = reconciler(() => {
  let n = 0;
  for (;;) {
    n = (n + 1) | 0;
  }
});
