/*
 * Example constructor in C: a WebApp CR becomes a Deployment and a Service, the same
 * outputs as the Rust plugin in plugins/webapp.
 */
#include <stdlib.h>
#include <string.h>

#include "inrun.h"

#define NAME_LABEL "app.kubernetes.io/name"
#define TIER_LABEL "demo.inrun.dev/tier"

/* {"app.kubernetes.io/name": name} */
static inrun_json *name_labels(const char *name) {
    return inrun_json_set_string(inrun_json_object(), NAME_LABEL, name);
}

static inrun_json *metadata(const char *name, const char *ns) {
    inrun_json *m = inrun_json_object();
    inrun_json_set_string(m, "name", name);
    inrun_json_set_string(m, "namespace", ns);
    inrun_json_set(m, "labels", name_labels(name));
    return m;
}

static int by_key(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The container's env: name/value pairs sorted by name (as the Rust plugin's BTreeMap). */
static const char *env_list(const inrun_json *env, inrun_json **out) {
    *out = NULL;
    if (inrun_json_is_null(env)) return NULL;
    if (!inrun_json_is_object(env)) return "spec.env: expected a map of strings";
    size_t n = inrun_json_len(env);
    if (n == 0) return NULL;
    const char **keys = inrun_alloc(n * sizeof(char *));
    for (size_t i = 0; i < n; i++) {
        keys[i] = inrun_json_key_at(env, i);
        if (!inrun_json_is_string(inrun_json_value_at(env, i)))
            return inrun_errorf("spec.env.%s: expected a string", keys[i]);
    }
    qsort(keys, n, sizeof(char *), by_key);
    inrun_json *list = inrun_json_array();
    for (size_t i = 0; i < n; i++) {
        inrun_json *var = inrun_json_object();
        inrun_json_set_string(var, "name", keys[i]);
        inrun_json_set(var, "value", inrun_json_clone(inrun_json_get(env, keys[i])));
        inrun_json_push(list, var);
    }
    *out = list;
    return NULL;
}

/* An unsigned integer field of the spec with a default, within [0, max]. */
static const char *uint_field(const inrun_json *spec, const char *field, int64_t dflt,
                              int64_t max, int64_t *out) {
    inrun_json *v = inrun_json_get(spec, field);
    *out = dflt;
    if (!v) return NULL;
    if (!inrun_json_as_int(v, out) || *out < 0 || *out > max)
        return inrun_errorf("spec.%s: expected an integer from 0 to %lld", field, (long long)max);
    return NULL;
}

const char *inrun_reconcile(const inrun_request *req, inrun_outcome *out) {
    if (req->finalizing) return NULL; /* the host deletes the children */
    inrun_json *spec = inrun_request_spec(req);
    if (!spec) return "spec.image is required";
    if (!inrun_json_is_object(spec)) return "spec: expected an object";
    inrun_json *image_v = inrun_json_get(spec, "image");
    if (!inrun_json_is_null(image_v) && !inrun_json_is_string(image_v))
        return "spec.image: expected a string";
    const char *image = inrun_json_as_string(image_v);
    if (!image || !*image) return "spec.image is required";

    int64_t replicas, port;
    const char *err;
    if ((err = uint_field(spec, "replicas", 1, 4294967295LL, &replicas))) return err;
    if ((err = uint_field(spec, "port", 8080, 65535, &port))) return err;
    inrun_json *env;
    if ((err = env_list(inrun_json_get(spec, "env"), &env))) return err;

    const char *name = inrun_request_name(req);
    const char *ns = inrun_request_namespace(req);
    if (!ns) ns = "default";

    /* The Deployment. */
    inrun_json *cport = inrun_json_object();
    inrun_json_set_string(cport, "name", "http");
    inrun_json_set_int(cport, "containerPort", port);
    inrun_json_set_string(cport, "protocol", "TCP");
    inrun_json *container = inrun_json_object();
    inrun_json_set_string(container, "name", "web");
    inrun_json_set_string(container, "image", image);
    inrun_json_set(container, "ports", inrun_json_push(inrun_json_array(), cport));
    if (env) inrun_json_set(container, "env", env);

    inrun_json *pod_spec = inrun_json_object();
    inrun_json_set(pod_spec, "containers", inrun_json_push(inrun_json_array(), container));
    inrun_json *template = inrun_json_object();
    inrun_json_set(template, "metadata", inrun_json_set(inrun_json_object(), "labels", name_labels(name)));
    inrun_json_set(template, "spec", pod_spec);
    inrun_json *dspec = inrun_json_object();
    inrun_json_set_int(dspec, "replicas", replicas);
    inrun_json_set(dspec, "selector", inrun_json_set(inrun_json_object(), "matchLabels", name_labels(name)));
    inrun_json_set(dspec, "template", template);
    inrun_json *deployment = inrun_json_object();
    inrun_json_set_string(deployment, "apiVersion", "apps/v1");
    inrun_json_set_string(deployment, "kind", "Deployment");
    inrun_json_set(deployment, "metadata", metadata(name, ns));
    inrun_json_set(deployment, "spec", dspec);

    /* The Service: port 80 to the container's port. */
    inrun_json *sport = inrun_json_object();
    inrun_json_set_string(sport, "name", "http");
    inrun_json_set_int(sport, "port", 80);
    inrun_json_set_int(sport, "targetPort", port);
    inrun_json_set_string(sport, "protocol", "TCP");
    inrun_json *sspec = inrun_json_object();
    inrun_json_set(sspec, "selector", name_labels(name));
    inrun_json_set(sspec, "ports", inrun_json_push(inrun_json_array(), sport));
    inrun_json *service = inrun_json_object();
    inrun_json_set_string(service, "apiVersion", "v1");
    inrun_json_set_string(service, "kind", "Service");
    inrun_json_set(service, "metadata", metadata(name, ns));
    inrun_json_set(service, "spec", sspec);

    inrun_outcome_resource(out, deployment);
    inrun_outcome_resource(out, service);
    inrun_outcome_status_string(out, "image", image);
    inrun_outcome_status_int(out, "replicas", replicas);
    inrun_outcome_status_string(out, "url", inrun_errorf("http://%s.%s.svc:80", name, ns));
    inrun_outcome_label(out, TIER_LABEL, "web");
    return NULL;
}
