/* Test guest: the C twin of the Rust `reporter` (built against wit/0.2.0). It returns one
 * ConfigMap `<name>-report` holding spec.size, a condition `Sized` (True when spec.size is
 * at least 1) and a `Resized` event naming the size. */
#include "inrun.h"

const char *inrun_reconcile(const inrun_request *req, inrun_outcome *out) {
    int64_t size = 0;
    inrun_json_as_int(inrun_json_get(inrun_request_spec(req), "size"), &size);
    const char *name = inrun_request_name(req);
    inrun_json *cm = inrun_json_object();
    inrun_json_set_string(cm, "apiVersion", "v1");
    inrun_json_set_string(cm, "kind", "ConfigMap");
    inrun_json_set_string(inrun_json_object_field(cm, "metadata"), "name",
                          inrun_errorf("%s-report", name));
    inrun_json_set_string(inrun_json_object_field(cm, "data"), "size",
                          inrun_errorf("%lld", (long long)size));
    inrun_outcome_resource(out, cm);
    if (size >= 1)
        inrun_outcome_condition(out, "Sized", INRUN_TRUE, "SizeSet",
                                inrun_errorf("size is %lld", (long long)size));
    else
        inrun_outcome_condition(out, "Sized", INRUN_FALSE, "NoSize", "spec.size is not set");
    inrun_outcome_event(out, false, "Resized", inrun_errorf("size %lld", (long long)size));
    return NULL;
}
