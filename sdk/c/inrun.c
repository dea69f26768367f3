/*
 * Inrun C SDK: the glue between the `wit-bindgen c` bindings of one world and the typed
 * API in inrun.h. Compile it with -DINRUN_WORLD_RECONCILER (bindings from
 * `wit-bindgen c wit --world reconciler`) or -DINRUN_WORLD_HOOKS (`--world hooks`); add
 * -DINRUN_CONTRACT_0_2_0 for bindings of the same worlds from `wit/0.2.0`, whose outcome
 * carries conditions and events.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "inrun.h"
#include "inrun_internal.h"

#if defined(INRUN_WORLD_HOOKS)
#include "hooks.h"
#define W(x) hooks_##x
#elif defined(INRUN_WORLD_RECONCILER)
#include "reconciler.h"
#define W(x) reconciler_##x
#else
#error "define INRUN_WORLD_RECONCILER or INRUN_WORLD_HOOKS"
#endif

#if defined(INRUN_CONTRACT_0_2_0)
#define HOST(x) inrun_reconciler_0_1_0_host_##x
#define V2(x) inrun_reconciler_0_2_0_types_##x
#else
#define HOST(x) inrun_reconciler_host_##x
#endif

typedef W(string_t) wit_string;
typedef W(request_t) wit_request;
typedef W(outcome_t) wit_outcome;

/* ---------------------------------------------------------------------------- log */

void inrun_log(inrun_log_level level, const char *message) {
    wit_string s = {(uint8_t *)message, strlen(message)};
    HOST(log)((HOST(level_t))level, &s);
}

void inrun_logf(inrun_log_level level, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const char *s = inrun__vformat(fmt, ap);
    va_end(ap);
    inrun_log(level, s);
}

/* ------------------------------------------------------------------------ request */

const char *inrun_request_name(const inrun_request *req) {
    const char *name = inrun_json_as_string(inrun_json_pointer(req->object, "/metadata/name"));
    if (name) return name;
    const char *slash = strrchr(req->key, '/');
    return slash ? slash + 1 : req->key;
}

const char *inrun_request_namespace(const inrun_request *req) {
    const char *ns = inrun_json_as_string(inrun_json_pointer(req->object, "/metadata/namespace"));
    if (ns && *ns) return ns;
    const char *slash = strchr(req->key, '/');
    return slash ? inrun__strndup(req->key, (size_t)(slash - req->key)) : NULL;
}

inrun_json *inrun_request_spec(const inrun_request *req) {
    inrun_json *spec = inrun_json_get(req->object, "spec");
    return inrun_json_is_null(spec) ? NULL : spec;
}

inrun_json *inrun_request_arg(const inrun_request *req, const char *name) {
    inrun_json *arg = inrun_json_get(req->args, name);
    return inrun_json_is_null(arg) ? NULL : arg;
}

static char *text(const wit_string *s) { return inrun__strndup((const char *)s->ptr, s->len); }

static const char *parse_field(const char *field, const wit_string *s, inrun_json **out) {
    const char *err = NULL;
    *out = inrun_json_parse((const char *)s->ptr, s->len, &err);
    return *out ? NULL : inrun_errorf("%s is not valid JSON: %s", field, err);
}

static const char *read_request(const wit_request *w, inrun_request *req) {
    const char *err;
    memset(req, 0, sizeof *req);
    req->key = text(&w->key);
    req->api_version = text(&w->api_version);
    req->kind = text(&w->kind);
    req->finalizing = w->finalizing;
    if ((err = parse_field("request.object", &w->object, &req->object))) return err;
    if ((err = parse_field("request.args", &w->args, &req->args))) return err;
    if (w->target.is_some) req->target = text(&w->target.val);
    if (w->children.is_some &&
        (err = parse_field("request.children", &w->children.val, &req->children)))
        return err;
    return NULL;
}

/* ------------------------------------------------------------------------ outcome */

static void outcome_init(inrun_outcome *o) {
    memset(o, 0, sizeof *o);
    o->resources = inrun_json_array();
}

void inrun_outcome_resource(inrun_outcome *o, inrun_json *object) {
    inrun_json_push(o->resources, object);
}

void inrun_outcome_intent(inrun_outcome *o, const char *type, inrun_json *fields) {
    inrun_json *intent = inrun_json_object();
    inrun_json_set_string(intent, "type", type);
    inrun_json_set(intent, "fields", fields ? fields : inrun_json_object());
    inrun_json_push(o->resources, intent);
}

void inrun_outcome_status(inrun_outcome *o, const char *key, inrun_json *value) {
    if (!inrun_json_is_object(o->status)) o->status = inrun_json_object();
    inrun_json_set(o->status, key, value);
}

void inrun_outcome_status_string(inrun_outcome *o, const char *key, const char *value) {
    inrun_outcome_status(o, key, inrun_json_string(value));
}

void inrun_outcome_status_int(inrun_outcome *o, const char *key, int64_t value) {
    inrun_outcome_status(o, key, inrun_json_int(value));
}

void inrun_outcome_label(inrun_outcome *o, const char *key, const char *value) {
    inrun_string_map_set(&o->labels, key, value);
}

void inrun_outcome_annotation(inrun_outcome *o, const char *key, const char *value) {
    inrun_string_map_set(&o->annotations, key, value);
}

void inrun_outcome_requeue(inrun_outcome *o) { o->requeue = true; }

void inrun_outcome_requeue_after_ms(inrun_outcome *o, uint64_t ms) {
    o->has_requeue_after = true;
    o->requeue_after_ms = ms;
}

void inrun_outcome_cleanup_after(inrun_outcome *o, uint32_t seconds) {
    o->has_cleanup = true;
    o->cleanup_after_seconds = seconds;
}

bool inrun_outcome_condition(inrun_outcome *o, const char *type, inrun_truth status,
                             const char *reason, const char *message) {
    size_t i = 0;
    while (i < o->conditions_len && strcmp(o->conditions[i].type, type) != 0) i++;
    if (i == INRUN_MAX_CONDITIONS) return false;
    if (i == o->conditions_len) o->conditions_len++;
    o->conditions[i] = (inrun_condition){inrun_strdup(type), status,
                                         inrun_strdup(reason ? reason : ""),
                                         inrun_strdup(message ? message : "")};
    return true;
}

bool inrun_outcome_event(inrun_outcome *o, bool warning, const char *reason, const char *message) {
    if (o->events_len == INRUN_MAX_EVENTS) return false;
    o->events[o->events_len++] =
        (inrun_event){warning, inrun_strdup(reason), inrun_strdup(message ? message : "")};
    return true;
}

/* A malloc'd copy for the host (the bindings' post-return frees it). */
static void host_string(wit_string *out, const char *s, size_t len) {
    out->ptr = malloc(len ? len : 1);
    if (!out->ptr) __builtin_trap();
    memcpy(out->ptr, s, len);
    out->len = len;
}

static void write_pairs(W(list_tuple2_string_string_t) *out, const inrun_string_map *m) {
    out->len = m->len;
    out->ptr = m->len ? malloc(m->len * sizeof *out->ptr) : NULL;
    for (size_t i = 0; i < m->len; i++) {
        host_string(&out->ptr[i].f0, m->keys[i], strlen(m->keys[i]));
        host_string(&out->ptr[i].f1, m->values[i], strlen(m->values[i]));
    }
}

static void write_outcome(const inrun_outcome *o, wit_outcome *w) {
    memset(w, 0, sizeof *w);
    if (o->status) {
        size_t len;
        w->status.is_some = true;
        w->status.val.ptr = (uint8_t *)inrun_json_emit(o->status, &len);
        w->status.val.len = len;
    }
    size_t n = inrun_json_len(o->resources);
    w->resources.len = n;
    w->resources.ptr = n ? malloc(n * sizeof *w->resources.ptr) : NULL;
    for (size_t i = 0; i < n; i++) {
        size_t len;
        w->resources.ptr[i].ptr = (uint8_t *)inrun_json_emit(inrun_json_at(o->resources, i), &len);
        w->resources.ptr[i].len = len;
    }
    write_pairs(&w->labels, &o->labels);
    write_pairs(&w->annotations, &o->annotations);
    w->requeue = o->requeue;
    w->requeue_after_ms.is_some = o->has_requeue_after;
    w->requeue_after_ms.val = o->requeue_after_ms;
    w->cleanup.is_some = o->has_cleanup;
    w->cleanup.val.after_seconds = o->cleanup_after_seconds;
#if defined(INRUN_CONTRACT_0_2_0)
    size_t nc = o->conditions_len;
    w->conditions.len = nc;
    w->conditions.ptr = nc ? malloc(nc * sizeof *w->conditions.ptr) : NULL;
    for (size_t i = 0; i < nc; i++) {
        const inrun_condition *c = &o->conditions[i];
        host_string(&w->conditions.ptr[i].type, c->type, strlen(c->type));
        w->conditions.ptr[i].status.is_some = c->status != INRUN_UNKNOWN;
        w->conditions.ptr[i].status.val = c->status == INRUN_TRUE;
        host_string(&w->conditions.ptr[i].reason, c->reason, strlen(c->reason));
        host_string(&w->conditions.ptr[i].message, c->message, strlen(c->message));
    }
    size_t ne = o->events_len;
    w->events.len = ne;
    w->events.ptr = ne ? malloc(ne * sizeof *w->events.ptr) : NULL;
    for (size_t i = 0; i < ne; i++) {
        const inrun_event *e = &o->events[i];
        w->events.ptr[i].type = e->warning ? INRUN_RECONCILER_0_2_0_TYPES_EVENT_TYPE_WARNING
                                           : INRUN_RECONCILER_0_2_0_TYPES_EVENT_TYPE_NORMAL;
        host_string(&w->events.ptr[i].reason, e->reason, strlen(e->reason));
        host_string(&w->events.ptr[i].message, e->message, strlen(e->message));
    }
#endif
}

/* Ends a call: the outcome or the error goes to the host, the arena is freed. */
static bool finish(const char *error, const inrun_outcome *o, wit_outcome *ret, wit_string *err) {
#if !defined(INRUN_CONTRACT_0_2_0)
    if (!error && (o->conditions_len || o->events_len))
        error = "conditions and events need a component built against wit/0.2.0 "
                "(-DINRUN_CONTRACT_0_2_0)";
#endif
    bool ok = error == NULL;
    if (ok) write_outcome(o, ret);
    else host_string(err, error, strlen(error));
    inrun__arena_reset();
    return ok;
}

#if defined(INRUN_WORLD_RECONCILER)

bool exports_reconciler_reconcile(wit_request *req, wit_outcome *ret, wit_string *err) {
    inrun_request r;
    inrun_outcome o;
    outcome_init(&o);
    const char *error = read_request(req, &r);
    W(request_free)(req);
    if (!error) error = inrun_reconcile(&r, &o);
    return finish(error, &o, ret, err);
}

#else

static const char *read_outcome(const wit_outcome *w, inrun_outcome *o) {
    const char *err;
    outcome_init(o);
    if (w->status.is_some) {
        inrun_json *status;
        if ((err = parse_field("outcome.status", &w->status.val, &status))) return err;
        if (inrun_json_is_object(status)) o->status = status;
        else if (!inrun_json_is_null(status)) return "outcome.status is not a JSON object";
    }
    for (size_t i = 0; i < w->resources.len; i++) {
        inrun_json *r;
        const char *field = inrun_errorf("outcome.resources[%zu]", i);
        if ((err = parse_field(field, &w->resources.ptr[i], &r))) return err;
        inrun_json_push(o->resources, r);
    }
    for (size_t i = 0; i < w->labels.len; i++)
        inrun_string_map_set(&o->labels, text(&w->labels.ptr[i].f0), text(&w->labels.ptr[i].f1));
    for (size_t i = 0; i < w->annotations.len; i++)
        inrun_string_map_set(&o->annotations, text(&w->annotations.ptr[i].f0),
                             text(&w->annotations.ptr[i].f1));
    o->requeue = w->requeue;
    o->has_requeue_after = w->requeue_after_ms.is_some;
    o->requeue_after_ms = w->requeue_after_ms.val;
    o->has_cleanup = w->cleanup.is_some;
    o->cleanup_after_seconds = w->cleanup.val.after_seconds;
#if defined(INRUN_CONTRACT_0_2_0)
    for (size_t i = 0; i < w->conditions.len; i++) {
        const V2(condition_t) *c = &w->conditions.ptr[i];
        inrun_truth t = !c->status.is_some ? INRUN_UNKNOWN : c->status.val ? INRUN_TRUE : INRUN_FALSE;
        inrun_outcome_condition(o, text(&c->type), t, text(&c->reason), text(&c->message));
    }
    for (size_t i = 0; i < w->events.len; i++) {
        const V2(event_t) *e = &w->events.ptr[i];
        inrun_outcome_event(o, e->type == INRUN_RECONCILER_0_2_0_TYPES_EVENT_TYPE_WARNING,
                            text(&e->reason), text(&e->message));
    }
#endif
    return NULL;
}

void exports_hooks_functions(W(list_string_t) *ret) {
    size_t n = 0;
    while (inrun_hook_functions[n]) n++;
    ret->len = n;
    ret->ptr = n ? malloc(n * sizeof *ret->ptr) : NULL;
    for (size_t i = 0; i < n; i++)
        host_string(&ret->ptr[i], inrun_hook_functions[i], strlen(inrun_hook_functions[i]));
}

bool exports_hooks_call(wit_string *function, wit_request *req, wit_outcome *current,
                        wit_outcome *ret, wit_string *err) {
    inrun_request r;
    inrun_outcome o;
    const char *name = text(function);
    const char *error = read_request(req, &r);
    if (!error) error = read_outcome(current, &o);
    else outcome_init(&o);
    W(string_free)(function);
    W(request_free)(req);
    W(outcome_free)(current);
    if (!error) {
        bool known = false;
        for (size_t i = 0; inrun_hook_functions[i]; i++)
            if (strcmp(inrun_hook_functions[i], name) == 0) known = true;
        if (!known) {
            /* "unknown hook function `x`; this plugin has: a, b" */
            size_t len = 0;
            for (size_t i = 0; inrun_hook_functions[i]; i++) len += strlen(inrun_hook_functions[i]) + 2;
            char *list = inrun_alloc(len + 1);
            for (size_t i = 0; inrun_hook_functions[i]; i++) {
                if (i) strcat(list, ", ");
                strcat(list, inrun_hook_functions[i]);
            }
            error = inrun_errorf("unknown hook function `%s`; this plugin has: %s", name, list);
        }
    }
    if (!error) error = inrun_hook_call(name, &r, &o);
    return finish(error, &o, ret, err);
}

#endif
