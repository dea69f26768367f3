/* The @KIND@ reconciler: a ConfigMap with spec.message, and the message in status. */
#include "inrun.h"

const char *inrun_reconcile(const inrun_request *req, inrun_outcome *out) {
    if (req->finalizing) return NULL;
    const char *message = "hello";
    inrun_json *m = inrun_json_get(inrun_request_spec(req), "message");
    if (!inrun_json_is_null(m)) {
        if (!inrun_json_is_string(m)) return "spec.message must be a string";
        message = inrun_json_as_string(m);
    }
    inrun_json *meta = inrun_json_object();
    inrun_json_set_string(meta, "name", inrun_request_name(req));
    const char *ns = inrun_request_namespace(req);
    if (ns) inrun_json_set_string(meta, "namespace", ns);
    inrun_json *data = inrun_json_object();
    inrun_json_set_string(data, "message", message);
    inrun_json *cm = inrun_json_object();
    inrun_json_set_string(cm, "apiVersion", "v1");
    inrun_json_set_string(cm, "kind", "ConfigMap");
    inrun_json_set(cm, "metadata", meta);
    inrun_json_set(cm, "data", data);
    inrun_outcome_resource(out, cm);
    inrun_outcome_status_string(out, "message", message);
    return NULL;
}
