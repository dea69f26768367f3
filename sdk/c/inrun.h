/*
 * Inrun C SDK: write Inrun reconcilers and hooks in C, compiled to WebAssembly
 * components (world `reconciler` or `hooks` of inrun:reconciler@0.1.0).
 *
 * A reconciler defines one function:
 *
 *     const char *inrun_reconcile(const inrun_request *req, inrun_outcome *out);
 *
 * A hooks component defines a NULL-terminated list of names and one function:
 *
 *     const char *const inrun_hook_functions[] = {"my-hook", NULL};
 *     const char *inrun_hook_call(const char *function, const inrun_request *req,
 *                                 inrun_outcome *current);
 *
 * Both return NULL on success, or an error message (a string literal or one made with
 * inrun_errorf) that fails this reconcile.
 *
 * Memory: every value the SDK hands out (parsed JSON, strings from inrun_errorf, new
 * JSON values) lives in a per-call arena that is freed when the call returns. Never
 * free() them; never keep them across calls.
 *
 * The SDK imports nothing from WASI: a plugin that also avoids stdio (printf, FILE)
 * needs no WASI adapter. Log through inrun_log_* instead.
 */
#ifndef INRUN_H
#define INRUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------ JSON */

typedef enum {
    INRUN_JSON_NULL,
    INRUN_JSON_BOOL,
    INRUN_JSON_NUMBER,
    INRUN_JSON_STRING,
    INRUN_JSON_ARRAY,
    INRUN_JSON_OBJECT,
} inrun_json_kind;

/* A JSON value. Objects keep their keys in insertion order; a key appears once. */
typedef struct inrun_json inrun_json;

/* Parses `len` bytes of JSON text (one value, whitespace around it allowed). Returns NULL
 * and sets *err (when err is not NULL) to a message with the byte offset on bad input. */
inrun_json *inrun_json_parse(const char *text, size_t len, const char **err);

/* Writes `v` as compact JSON text, NUL-terminated; *len (when not NULL) gets its length.
 * The text is malloc'd: the caller frees it (the SDK hands it to the host). */
char *inrun_json_emit(const inrun_json *v, size_t *len);

/* Constructors (arena-allocated). */
inrun_json *inrun_json_null(void);
inrun_json *inrun_json_bool(bool b);
inrun_json *inrun_json_int(int64_t i);
inrun_json *inrun_json_number(double d);
inrun_json *inrun_json_string(const char *s);
inrun_json *inrun_json_stringn(const char *s, size_t len);
inrun_json *inrun_json_array(void);
inrun_json *inrun_json_object(void);
/* A deep copy (arena-allocated). */
inrun_json *inrun_json_clone(const inrun_json *v);

/* Inspection. Every accessor accepts NULL and then answers "absent". */
inrun_json_kind inrun_json_kind_of(const inrun_json *v);
bool inrun_json_is_null(const inrun_json *v); /* true for NULL too */
bool inrun_json_is_string(const inrun_json *v);
bool inrun_json_is_object(const inrun_json *v);
bool inrun_json_is_array(const inrun_json *v);
/* The string (NUL-terminated; may contain NULs if the JSON had \u0000), or NULL. */
const char *inrun_json_as_string(const inrun_json *v);
/* *out gets the number when `v` is a number that is an integer in int64 range. */
bool inrun_json_as_int(const inrun_json *v, int64_t *out);
bool inrun_json_as_number(const inrun_json *v, double *out);
bool inrun_json_as_bool(const inrun_json *v, bool *out);
/* Number of elements of an array or entries of an object; 0 otherwise. */
size_t inrun_json_len(const inrun_json *v);
/* Array element i, or NULL. */
inrun_json *inrun_json_at(const inrun_json *arr, size_t i);
/* Object entry i: its key and value, or NULL. */
const char *inrun_json_key_at(const inrun_json *obj, size_t i);
inrun_json *inrun_json_value_at(const inrun_json *obj, size_t i);
/* Object member `key`, or NULL when absent or `obj` is not an object. */
inrun_json *inrun_json_get(const inrun_json *obj, const char *key);
/* A JSON Pointer (RFC 6901) lookup, e.g. "/metadata/labels/app.kubernetes.io~1name" or
 * "/spec/containers/0/name"; "" is `v` itself. NULL when any step is missing. */
inrun_json *inrun_json_pointer(const inrun_json *v, const char *pointer);
/* Structural equality (objects compare as unordered maps, numbers by value). */
bool inrun_json_equal(const inrun_json *a, const inrun_json *b);

/* Editing. These return `target` (or the member), and do nothing on the wrong kind. */
/* Appends `item` to an array. */
inrun_json *inrun_json_push(inrun_json *arr, inrun_json *item);
/* Sets `key` on an object, replacing an existing value in place (keeping its position). */
inrun_json *inrun_json_set(inrun_json *obj, const char *key, inrun_json *value);
/* Removes `key` from an object; true when it was there. */
bool inrun_json_remove(inrun_json *obj, const char *key);
/* `obj.key` as an object, created when missing or replacing a value that is not an
 * object; NULL when `obj` is not an object. */
inrun_json *inrun_json_object_field(inrun_json *obj, const char *key);
/* Shorthands: set a string / integer / bool member. */
inrun_json *inrun_json_set_string(inrun_json *obj, const char *key, const char *s);
inrun_json *inrun_json_set_int(inrun_json *obj, const char *key, int64_t i);
inrun_json *inrun_json_set_bool(inrun_json *obj, const char *key, bool b);

/* ------------------------------------------------------------------------- Request */

/* What the host asks about one custom resource (CR). */
typedef struct {
    const char *key;         /* "namespace/name", or "name" for a cluster-scoped CR */
    const char *api_version; /* e.g. "demo.inrun.dev/v1alpha1" */
    const char *kind;        /* e.g. "WebApp" */
    inrun_json *object;      /* the CR, minus `request.object.exclude` */
    inrun_json *args;        /* the rendered reconcile.args (an object, `{}` if none) */
    bool finalizing;         /* true while the CR is being deleted */
    const char *target;      /* the serve target, or NULL */
    inrun_json *children;    /* observed children by kind then name, or NULL */
} inrun_request;

/* metadata.name, or the name part of the key. */
const char *inrun_request_name(const inrun_request *req);
/* metadata.namespace, or the namespace part of the key; NULL when cluster-scoped. */
const char *inrun_request_namespace(const inrun_request *req);
/* The CR's spec, or NULL when it has none (or it is null). */
inrun_json *inrun_request_spec(const inrun_request *req);
/* args.<name>, or NULL when missing or null. */
inrun_json *inrun_request_arg(const inrun_request *req, const char *name);

/* ------------------------------------------------------------------------- Outcome */

/* A sorted string map (labels, annotations): keys unique, in byte order. */
typedef struct {
    const char **keys;
    const char **values;
    size_t len, cap;
} inrun_string_map;

/* A condition's status. */
typedef enum { INRUN_FALSE = 0, INRUN_TRUE = 1, INRUN_UNKNOWN = 2 } inrun_truth;

/* A condition of the reconciler's on the CR (merged by type; Ready and Reconciled are the
 * host's). Strings live in the call's arena. */
typedef struct {
    const char *type;    /* CamelCase, e.g. "Degraded" */
    inrun_truth status;
    const char *reason;  /* CamelCase, e.g. "ReplicaDown" */
    const char *message; /* for people */
} inrun_condition;

/* An event to record on the CR (rate-limited by the host). */
typedef struct {
    bool warning;        /* Warning, else Normal */
    const char *reason;  /* CamelCase, e.g. "BackupStarted" */
    const char *message;
} inrun_event;

/* The most conditions and events one outcome may carry (as the host accepts). */
#define INRUN_MAX_CONDITIONS 16
#define INRUN_MAX_EVENTS 8

/* What the CR should become. Fields are public: a hook edits the outcome it is given. */
typedef struct {
    inrun_json *status;            /* an object merged into the CR's status, or NULL */
    inrun_json *resources;         /* an array: full objects or intents */
    inrun_string_map labels;       /* set on the CR */
    inrun_string_map annotations;  /* set on the CR */
    bool requeue;                  /* reconcile again after the default delay */
    bool has_requeue_after;
    uint64_t requeue_after_ms;     /* reconcile again after this long */
    bool has_cleanup;
    uint32_t cleanup_after_seconds; /* delete the CR after this grace period */
    /* Conditions and events: only a component built against wit/0.2.0
     * (-DINRUN_CONTRACT_0_2_0) carries them; a 0.1.0 one fails the call if any are set. */
    inrun_condition conditions[INRUN_MAX_CONDITIONS];
    size_t conditions_len;
    inrun_event events[INRUN_MAX_EVENTS];
    size_t events_len;
} inrun_outcome;

/* Adds a resource to apply (usually a full Kubernetes object). */
void inrun_outcome_resource(inrun_outcome *o, inrun_json *object);
/* Adds a resource in intent form {"type": type, "fields": fields}. */
void inrun_outcome_intent(inrun_outcome *o, const char *type, inrun_json *fields);
/* Sets status.<key> (creating the status object). */
void inrun_outcome_status(inrun_outcome *o, const char *key, inrun_json *value);
void inrun_outcome_status_string(inrun_outcome *o, const char *key, const char *value);
void inrun_outcome_status_int(inrun_outcome *o, const char *key, int64_t value);
/* Sets a label / annotation on the CR (a later value for the same key wins). */
void inrun_outcome_label(inrun_outcome *o, const char *key, const char *value);
void inrun_outcome_annotation(inrun_outcome *o, const char *key, const char *value);
/* Reconcile again after the host's default delay; holds a deletion while finalizing. */
void inrun_outcome_requeue(inrun_outcome *o);
/* Reconcile again after `ms` milliseconds (a refresh; does not hold a deletion). */
void inrun_outcome_requeue_after_ms(inrun_outcome *o, uint64_t ms);
/* Delete the CR after `seconds`. */
void inrun_outcome_cleanup_after(inrun_outcome *o, uint32_t seconds);
/* Sets a condition (replacing one of the same type); false when INRUN_MAX_CONDITIONS are
 * set already. The strings are copied. */
bool inrun_outcome_condition(inrun_outcome *o, const char *type, inrun_truth status,
                             const char *reason, const char *message);
/* Asks for an event; false when INRUN_MAX_EVENTS are set already. The strings are copied. */
bool inrun_outcome_event(inrun_outcome *o, bool warning, const char *reason, const char *message);

/* A string map lookup: the value, or NULL. */
const char *inrun_string_map_get(const inrun_string_map *m, const char *key);
/* Inserts or replaces, keeping the keys sorted. The strings are copied. */
void inrun_string_map_set(inrun_string_map *m, const char *key, const char *value);

/* ----------------------------------------------------------------------- Log, errors */

typedef enum {
    INRUN_LOG_TRACE,
    INRUN_LOG_DEBUG,
    INRUN_LOG_INFO,
    INRUN_LOG_WARN,
    INRUN_LOG_ERROR,
} inrun_log_level;

/* Writes a line to the host's log, tagged with the plugin (host.log import). */
void inrun_log(inrun_log_level level, const char *message);
/* printf-style (no floating point conversions: %f/%g print "?"). */
void inrun_logf(inrun_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
#define inrun_log_trace(msg) inrun_log(INRUN_LOG_TRACE, (msg))
#define inrun_log_debug(msg) inrun_log(INRUN_LOG_DEBUG, (msg))
#define inrun_log_info(msg) inrun_log(INRUN_LOG_INFO, (msg))
#define inrun_log_warn(msg) inrun_log(INRUN_LOG_WARN, (msg))
#define inrun_log_error(msg) inrun_log(INRUN_LOG_ERROR, (msg))

/* A formatted message in the call's arena, to return as an error: supports %s %d %i %u
 * %ld %lld %lu %llu %zu %c %% (and %x); no floating point. */
const char *inrun_errorf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A copy of `s` in the call's arena. */
char *inrun_strdup(const char *s);
/* Arena allocation for the current call (zeroed). */
void *inrun_alloc(size_t size);

/* -------------------------------------------------------------- What a plugin defines */

/* Reconciler world: decide what the CR should become. NULL = success. */
const char *inrun_reconcile(const inrun_request *req, inrun_outcome *out);

/* Hooks world: the functions `inrun_hook_call` accepts, NULL-terminated. */
extern const char *const inrun_hook_functions[];
/* Hooks world: adjust `current` in place. Only called with a listed name. NULL = success. */
const char *inrun_hook_call(const char *function, const inrun_request *req,
                            inrun_outcome *current);

#ifdef __cplusplus
}
#endif

#endif
