/*
 * Inrun C SDK: the glue between the `wit-bindgen c wit/0.2.0 --world %package` bindings
 * and the typed API in inrun_package.h. Compile with -DINRUN_WORLD_PACKAGE, with
 * inrun_json.c (and not inrun.c).
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "inrun_internal.h"
#include "inrun_package.h"
#include "package.h"

typedef package_string_t wit_string;
typedef package_options_t wit_options;

/* ---------------------------------------------------------------------------- log */

void inrun_log(inrun_log_level level, const char *message) {
    wit_string s = {(uint8_t *)message, strlen(message)};
    inrun_reconciler_0_1_0_host_log((inrun_reconciler_0_1_0_host_level_t)level, &s);
}

void inrun_logf(inrun_log_level level, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const char *s = inrun__vformat(fmt, ap);
    va_end(ap);
    inrun_log(level, s);
}

/* ------------------------------------------------------------------------ values */

static char *text(const wit_string *s) { return inrun__strndup((const char *)s->ptr, s->len); }

/* A malloc'd copy for the host (the bindings' post-return frees it). */
static void host_string(wit_string *out, const char *s) {
    size_t len = s ? strlen(s) : 0;
    out->ptr = len ? malloc(len) : NULL;
    if (len) memcpy(out->ptr, s, len);
    out->len = len;
}

static const char *const EVENTS[] = {"changed", "interval", "requested", "retry", "deleting"};

static const char *read_options(const wit_options *w, inrun_package_options *o) {
    memset(o, 0, sizeof *o);
    const char *err = NULL;
    o->config = inrun_json_parse((const char *)w->config.ptr, w->config.len, &err);
    if (!o->config) return inrun_errorf("options.config is not valid JSON: %s", err);
    if (!inrun_json_is_object(o->config)) return "options.config is not a JSON object";
    o->profile = text(&w->profile);
    o->state = text(&w->state);
    o->event = w->event <= INRUN_EVENT_DELETING ? (inrun_wake)w->event : INRUN_EVENT_CHANGED;
    o->event_name = EVENTS[o->event];
    o->group = text(&w->resource.group);
    o->version = text(&w->resource.version);
    o->plural = text(&w->resource.plural);
    o->kind = text(&w->resource.kind);
    o->namespace_ = w->namespace_.is_some ? text(&w->namespace_.val) : NULL;
    o->name = text(&w->name);
    return NULL;
}

struct inrun_problems {
    const char **items;
    size_t len, cap;
};

static void push(const char ***items, size_t *len, size_t *cap, const char *s) {
    if (*len == *cap) {
        size_t cap2 = *cap ? *cap * 2 : 8;
        const char **grown = inrun_alloc(cap2 * sizeof *grown);
        if (*len) memcpy(grown, *items, *len * sizeof *grown);
        *items = grown;
        *cap = cap2;
    }
    (*items)[(*len)++] = s;
}

void inrun_problem(inrun_problems *p, const char *problem) {
    push(&p->items, &p->len, &p->cap, inrun_strdup(problem ? problem : ""));
}

struct inrun_identity {
    const char *boundary, *profile;
    const char **state;
    size_t len, cap;
};

void inrun_identity_set(inrun_identity *id, const char *boundary, const char *profile) {
    id->boundary = boundary ? inrun_strdup(boundary) : NULL;
    id->profile = profile ? inrun_strdup(profile) : NULL;
}

void inrun_identity_state(inrun_identity *id, const char *entry) {
    push(&id->state, &id->len, &id->cap, entry ? inrun_strdup(entry) : NULL);
}

/* ---------------------------------------------------------------- what the host grants */

const char *inrun_fetch(const char *method, const char *url, const char *const *headers,
                        const char *body, inrun_http_response *out) {
    inrun_reconciler_0_1_0_http_request_t req;
    memset(&req, 0, sizeof req);
    req.method = (wit_string){(uint8_t *)method, strlen(method)};
    req.url = (wit_string){(uint8_t *)url, strlen(url)};
    size_t n = 0;
    while (headers && headers[2 * n] && headers[2 * n + 1]) n++;
    package_tuple2_string_string_t *pairs = n ? inrun_alloc(n * sizeof *pairs) : NULL;
    for (size_t i = 0; i < n; i++) {
        pairs[i].f0 = (wit_string){(uint8_t *)headers[2 * i], strlen(headers[2 * i])};
        pairs[i].f1 = (wit_string){(uint8_t *)headers[2 * i + 1], strlen(headers[2 * i + 1])};
    }
    req.headers = (package_list_tuple2_string_string_t){pairs, n};
    if (body) {
        req.body.is_some = true;
        req.body.val = (package_list_u8_t){(uint8_t *)body, strlen(body)};
    }
    inrun_reconciler_0_1_0_http_response_t answer;
    wit_string err;
    if (!inrun_reconciler_0_1_0_http_fetch(&req, &answer, &err)) {
        const char *why = text(&err);
        package_string_free(&err);
        return why;
    }
    out->status = answer.status;
    out->body = inrun__strndup((const char *)answer.body.ptr, answer.body.len);
    out->body_len = answer.body.len;
    inrun_reconciler_0_1_0_http_response_free(&answer);
    return NULL;
}

const char *inrun_credential(const char *name, const char *key, const char **value) {
    wit_string n = {(uint8_t *)name, strlen(name)};
    wit_string k = {(uint8_t *)key, strlen(key)};
    wit_string ret, err;
    if (!inrun_reconciler_0_2_0_credentials_get(&n, &k, &ret, &err)) {
        const char *why = text(&err);
        package_string_free(&err);
        return why;
    }
    *value = text(&ret);
    package_string_free(&ret);
    return NULL;
}

/* ---------------------------------------------------------------------- exports */

/* Ends a call that failed: the error goes to the host, the arena is freed. */
static bool fail(const char *error, wit_string *err) {
    host_string(err, error);
    inrun__arena_reset();
    return false;
}

void exports_package_validate(wit_options *opts, package_list_string_t *ret) {
    inrun_package_options o;
    inrun_problems p = {0};
    const char *error = read_options(opts, &o);
    package_options_free(opts);
    if (!error) error = inrun_package_validate(&o, &p);
    if (error) inrun_problem(&p, error);
    ret->len = p.len;
    ret->ptr = p.len ? malloc(p.len * sizeof *ret->ptr) : NULL;
    for (size_t i = 0; i < p.len; i++) host_string(&ret->ptr[i], p.items[i]);
    inrun__arena_reset();
}

bool exports_package_identity(wit_options *opts, package_identity_t *ret, wit_string *err) {
    inrun_package_options o;
    inrun_identity id = {0};
    const char *error = read_options(opts, &o);
    package_options_free(opts);
    if (!error) error = inrun_package_identity(&o, &id);
    if (!error && (!id.boundary || !id.profile))
        error = "identity: set the boundary and the profile (inrun_identity_set)";
    if (error) return fail(error, err);
    host_string(&ret->boundary, id.boundary);
    host_string(&ret->profile, id.profile);
    ret->state.len = id.len;
    ret->state.ptr = id.len ? malloc(id.len * sizeof *ret->state.ptr) : NULL;
    for (size_t i = 0; i < id.len; i++) {
        ret->state.ptr[i].is_some = id.state[i] != NULL;
        if (id.state[i]) host_string(&ret->state.ptr[i].val, id.state[i]);
    }
    inrun__arena_reset();
    return true;
}

bool exports_package_observe(wit_options *opts, package_observation_t *ret, wit_string *err) {
    inrun_package_options o;
    inrun_observation seen = {0};
    const char *error = read_options(opts, &o);
    package_options_free(opts);
    if (!error) error = inrun_package_observe(&o, &seen);
    if (error) return fail(error, err);
    ret->exists = seen.exists;
    ret->matches = seen.matches;
    ret->ready = seen.ready;
    inrun__arena_reset();
    return true;
}

static bool workflow(bool delete, wit_options *opts, package_workflow_t *ret, wit_string *err) {
    inrun_package_options o;
    inrun_workflow w = {INRUN_COMPLETED, NULL};
    const char *error = read_options(opts, &o);
    package_options_free(opts);
    if (!error) error = delete ? inrun_package_delete(&o, &w) : inrun_package_converge(&o, &w);
    if (error) return fail(error, err);
    ret->progress = w.progress == INRUN_PENDING  ? INRUN_RECONCILER_0_2_0_INFRASTRUCTURE_PROGRESS_PENDING
                    : w.progress == INRUN_FAILED ? INRUN_RECONCILER_0_2_0_INFRASTRUCTURE_PROGRESS_FAILED
                                                 : INRUN_RECONCILER_0_2_0_INFRASTRUCTURE_PROGRESS_COMPLETED;
    ret->detail.is_some = w.detail != NULL;
    if (w.detail) host_string(&ret->detail.val, w.detail);
    inrun__arena_reset();
    return true;
}

bool exports_package_converge(wit_options *opts, package_workflow_t *ret, wit_string *err) {
    return workflow(false, opts, ret, err);
}

bool exports_package_delete(wit_options *opts, package_workflow_t *ret, wit_string *err) {
    return workflow(true, opts, ret, err);
}
