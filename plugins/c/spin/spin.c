/* Test guest: an endless loop the optimiser cannot remove (a volatile counter). The host
 * must interrupt it at its deadline and the next call must work. */
#include "inrun.h"

static volatile unsigned long long spins;

const char *inrun_reconcile(const inrun_request *req, inrun_outcome *out) {
    (void)req;
    (void)out;
    for (;;) spins++;
}
