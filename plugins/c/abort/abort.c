/* Test guest: calls abort(), which traps. The host must fail only this call. */
#include <stdlib.h>

#include "inrun.h"

const char *inrun_reconcile(const inrun_request *req, inrun_outcome *out) {
    (void)out;
    inrun_log_error("about to abort");
    if (req) abort();
    return "unreachable";
}
