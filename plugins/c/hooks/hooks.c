/*
 * Example hooks in C, the same functions as the Rust plugin in plugins/labels-hooks:
 *
 * - add-labels: label every resource, and the CR, demo.inrun.dev/team: <args.team>
 *   ("platform" when the Blueprint passes no team argument).
 * - annotate: annotate every resource demo.inrun.dev/rendered-by: hooks.
 * - add-sidecar: add a log-shipper container (busybox:1.36) to every Deployment's pod
 *   template, once.
 *
 * Hooks edit full objects only: a resource in intent form ({"type", "fields"}) has no
 * metadata yet and is passed through untouched.
 */
#include <string.h>

#include "inrun.h"

#define TEAM_LABEL "demo.inrun.dev/team"
#define DEFAULT_TEAM "platform"
#define RENDERED_BY "demo.inrun.dev/rendered-by"
#define SIDECAR_NAME "log-shipper"
#define SIDECAR_IMAGE "busybox:1.36"

const char *const inrun_hook_functions[] = {"add-labels", "annotate", "add-sidecar", NULL};

/* A resource that is a full Kubernetes object (it has a kind), not an intent. */
static bool full_object(const inrun_json *resource) {
    return inrun_json_is_object(resource) && inrun_json_get(resource, "kind") != NULL;
}

/* Sets metadata.<field>.<key> = value on every full object. */
static void set_metadata_entry(inrun_outcome *current, const char *field, const char *key,
                               const char *value) {
    for (size_t i = 0; i < inrun_json_len(current->resources); i++) {
        inrun_json *r = inrun_json_at(current->resources, i);
        if (!full_object(r)) continue;
        inrun_json *map = inrun_json_object_field(inrun_json_object_field(r, "metadata"), field);
        inrun_json_set_string(map, key, value);
    }
}

static const char *add_labels(const inrun_request *req, inrun_outcome *current) {
    const char *team = DEFAULT_TEAM;
    inrun_json *arg = inrun_request_arg(req, "team");
    if (arg) {
        team = inrun_json_as_string(arg);
        if (!team) return "args.team: expected a string";
    }
    set_metadata_entry(current, "labels", TEAM_LABEL, team);
    inrun_outcome_label(current, TEAM_LABEL, team);
    return NULL;
}

static void add_sidecar(inrun_outcome *current) {
    for (size_t i = 0; i < inrun_json_len(current->resources); i++) {
        inrun_json *r = inrun_json_at(current->resources, i);
        if (!full_object(r)) continue;
        const char *kind = inrun_json_as_string(inrun_json_get(r, "kind"));
        if (!kind || strcmp(kind, "Deployment") != 0) continue;
        inrun_json *containers = inrun_json_pointer(r, "/spec/template/spec/containers");
        if (!inrun_json_is_array(containers)) continue;
        bool present = false;
        for (size_t c = 0; c < inrun_json_len(containers); c++) {
            const char *name = inrun_json_as_string(inrun_json_get(inrun_json_at(containers, c), "name"));
            if (name && strcmp(name, SIDECAR_NAME) == 0) present = true;
        }
        if (present) continue;
        inrun_json *sidecar = inrun_json_object();
        inrun_json_set_string(sidecar, "name", SIDECAR_NAME);
        inrun_json_set_string(sidecar, "image", SIDECAR_IMAGE);
        inrun_json_push(containers, sidecar);
    }
}

const char *inrun_hook_call(const char *function, const inrun_request *req,
                            inrun_outcome *current) {
    if (strcmp(function, "add-labels") == 0) return add_labels(req, current);
    if (strcmp(function, "annotate") == 0) {
        set_metadata_entry(current, "annotations", RENDERED_BY, "hooks");
        return NULL;
    }
    if (strcmp(function, "add-sidecar") == 0) {
        add_sidecar(current);
        return NULL;
    }
    return inrun_errorf("unknown hook function `%s`", function);
}
