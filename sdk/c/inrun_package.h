/*
 * Inrun C SDK: infrastructure packages (world `package` of inrun:reconciler@0.2.0,
 * `wit/0.2.0`). A package stands for something outside Kubernetes (a database, a bucket,
 * a DNS zone); the host calls validate, identity and observe, and converge or delete only
 * when what it observes calls for it. A package defines five functions:
 *
 *     const char *inrun_package_validate(const inrun_package_options *o, inrun_problems *p);
 *     const char *inrun_package_identity(const inrun_package_options *o, inrun_identity *id);
 *     const char *inrun_package_observe(const inrun_package_options *o, inrun_observation *seen);
 *     const char *inrun_package_converge(const inrun_package_options *o, inrun_workflow *w);
 *     const char *inrun_package_delete(const inrun_package_options *o, inrun_workflow *w);
 *
 * Each returns NULL on success or an error message that fails that step; the message
 * (and a workflow's detail, and validate's problems) reaches only the host's log, the CR
 * a generic reason. Every call must be idempotent. Memory is the call's arena, as in
 * inrun.h. Compile inrun_package.c and inrun_json.c with -DINRUN_WORLD_PACKAGE against
 * `wit-bindgen c wit/0.2.0 --world %package`.
 */
#ifndef INRUN_PACKAGE_H
#define INRUN_PACKAGE_H

#include "inrun.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Why the host calls. */
typedef enum {
    INRUN_EVENT_CHANGED,   /* the CR is new, or its spec changed */
    INRUN_EVENT_INTERVAL,  /* spec.reconcileInterval passed */
    INRUN_EVENT_REQUESTED, /* the inrun.dev/reconcile-request annotation changed */
    INRUN_EVENT_RETRY,     /* after a failure, or infrastructure not ready yet */
    INRUN_EVENT_DELETING,  /* the CR is being deleted with deletionPolicy: Delete */
} inrun_wake;

/* What every call receives. */
typedef struct {
    inrun_json *config;    /* spec.config, an object ({} when absent) */
    const char *profile;   /* spec.config.profile, else "<namespace>--<name>" */
    const char *state;     /* spec.state ("running" by default) */
    inrun_wake event;      /* what woke the CR */
    const char *event_name; /* "changed", "interval", "requested", "retry", "deleting" */
    const char *group, *version, *plural, *kind; /* the CR's type */
    const char *namespace_; /* NULL for a cluster-scoped CR */
    const char *name;
} inrun_package_options;

/* validate's problems (each copied). */
typedef struct inrun_problems inrun_problems;
void inrun_problem(inrun_problems *p, const char *problem);

/* Which thing the CR stands for: the backend boundary, the credentials profile, and what
 * identifies the thing within the boundary (entries may be NULL). */
typedef struct inrun_identity inrun_identity;
void inrun_identity_set(inrun_identity *id, const char *boundary, const char *profile);
void inrun_identity_state(inrun_identity *id, const char *entry);

/* What observe saw. */
typedef struct {
    bool exists, matches, ready;
} inrun_observation;

/* How converge or delete went: completed (the default), pending (still running on the
 * backend: observed again later) or failed (retried with backoff); detail for the log. */
typedef enum { INRUN_COMPLETED, INRUN_PENDING, INRUN_FAILED } inrun_progress;
typedef struct {
    inrun_progress progress;
    const char *detail; /* or NULL */
} inrun_workflow;

/* An HTTP answer (the body NUL-terminated too). */
typedef struct {
    uint16_t status;
    const char *body;
    size_t body_len;
} inrun_http_response;

/* An HTTP request through the host, only to hosts the Blueprint grants
 * (package.capabilities.http). `headers`: name, value, name, value, ..., NULL. `body` may
 * be NULL. NULL on success (*out filled), else why not. */
const char *inrun_fetch(const char *method, const char *url, const char *const *headers,
                        const char *body, inrun_http_response *out);

/* The value of `key` in the Secret `name` of the CR's namespace, when the Blueprint grants
 * it (package.capabilities.credentials): NULL on success (*value set, in the arena), else
 * why not (never the value). Keep it out of what the package returns. */
const char *inrun_credential(const char *name, const char *key, const char **value);

/* What a package defines. */
const char *inrun_package_validate(const inrun_package_options *o, inrun_problems *p);
const char *inrun_package_identity(const inrun_package_options *o, inrun_identity *id);
const char *inrun_package_observe(const inrun_package_options *o, inrun_observation *seen);
const char *inrun_package_converge(const inrun_package_options *o, inrun_workflow *w);
const char *inrun_package_delete(const inrun_package_options *o, inrun_workflow *w);

#ifdef __cplusplus
}
#endif

#endif
