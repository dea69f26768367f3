/* Test guest: the infrastructure package of plugins/infra (Rust) in C. Its things live in
 * an HTTP service at config.endpoint, one per CR, named by its profile: GET
 * /things/<profile> observes (404: absent; else size and ready), PUT {"size": n} converges
 * (202: still working), DELETE deletes. config.token {secret, key} sends that credential
 * as a bearer token. */
#include <string.h>

#include "inrun_package.h"

static int64_t size_of(const inrun_package_options *o) {
    int64_t size = 0;
    if (!inrun_json_as_int(inrun_json_get(o->config, "size"), &size)) return 0;
    return size;
}

static const char *url(const inrun_package_options *o, const char **out) {
    const char *endpoint = inrun_json_as_string(inrun_json_get(o->config, "endpoint"));
    if (!endpoint) return "config.endpoint is required";
    char *base = inrun_strdup(endpoint);
    size_t n = strlen(base);
    while (n && base[n - 1] == '/') base[--n] = '\0';
    *out = inrun_errorf("%s/things/%s", base, o->profile);
    return NULL;
}

/* Sends `method` with the event header and, when config.token is set, the credential. */
static const char *send(const inrun_package_options *o, const char *method, const char *body,
                        inrun_http_response *answer) {
    const char *to, *err;
    if ((err = url(o, &to))) return err;
    const char *headers[7] = {"x-inrun-event", o->event_name, "content-type", "application/json",
                              NULL, NULL, NULL};
    inrun_json *token = inrun_json_get(o->config, "token");
    if (token) {
        const char *value;
        err = inrun_credential(inrun_json_as_string(inrun_json_get(token, "secret")) ?: "",
                               inrun_json_as_string(inrun_json_get(token, "key")) ?: "", &value);
        if (err) return err;
        headers[4] = "authorization";
        headers[5] = inrun_errorf("Bearer %s", value);
    }
    return inrun_fetch(method, to, headers, body, answer);
}

const char *inrun_package_validate(const inrun_package_options *o, inrun_problems *p) {
    if (size_of(o) < 1) inrun_problem(p, "config.size must be a whole number from 1");
    return NULL;
}

const char *inrun_package_identity(const inrun_package_options *o, inrun_identity *id) {
    const char *endpoint = inrun_json_as_string(inrun_json_get(o->config, "endpoint"));
    if (!endpoint) return "config.endpoint is required";
    inrun_identity_set(id, endpoint, o->profile);
    inrun_identity_state(id, o->profile);
    inrun_identity_state(id, inrun_json_as_string(inrun_json_get(o->config, "zone")));
    return NULL;
}

const char *inrun_package_observe(const inrun_package_options *o, inrun_observation *seen) {
    inrun_http_response answer;
    const char *err = send(o, "GET", NULL, &answer);
    if (err) return err;
    if (answer.status == 404) return NULL;
    if (answer.status != 200) return inrun_errorf("observe: the service answered %u", answer.status);
    inrun_json *thing = inrun_json_parse(answer.body, answer.body_len, &err);
    if (!thing) return inrun_errorf("observe: the answer is not JSON: %s", err);
    int64_t size = 0;
    bool ready = false;
    inrun_json_as_int(inrun_json_get(thing, "size"), &size);
    inrun_json_as_bool(inrun_json_get(thing, "ready"), &ready);
    seen->exists = true;
    seen->matches = size == size_of(o);
    seen->ready = ready;
    return NULL;
}

const char *inrun_package_converge(const inrun_package_options *o, inrun_workflow *w) {
    inrun_http_response answer;
    const char *body = inrun_errorf("{\"size\":%lld}", (long long)size_of(o));
    const char *err = send(o, "PUT", body, &answer);
    if (err) return err;
    if (answer.status == 200 || answer.status == 201 || answer.status == 204) return NULL;
    if (answer.status == 202) {
        w->progress = INRUN_PENDING;
        return NULL;
    }
    return inrun_errorf("converge: the service answered %u", answer.status);
}

const char *inrun_package_delete(const inrun_package_options *o, inrun_workflow *w) {
    inrun_http_response answer;
    const char *err = send(o, "DELETE", NULL, &answer);
    if (err) return err;
    if (answer.status == 200 || answer.status == 204 || answer.status == 404) return NULL;
    if (answer.status == 202) {
        w->progress = INRUN_PENDING;
        return NULL;
    }
    return inrun_errorf("delete: the service answered %u", answer.status);
}
