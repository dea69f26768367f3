/* Native tests of the SDK's JSON reader/writer: `sdk/c/test/run.sh`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inrun.h"
#include "inrun_internal.h"

static int failures, passes;

static void check(int ok, const char *what) {
    if (ok) passes++;
    else {
        failures++;
        fprintf(stderr, "FAIL: %s\n", what);
    }
}

/* parse `in`, emit, expect `out` */
static void roundtrip(const char *in, const char *out) {
    const char *err = NULL;
    inrun_json *v = inrun_json_parse(in, strlen(in), &err);
    if (!v) {
        fprintf(stderr, "FAIL: parse %s: %s\n", in, err);
        failures++;
        return;
    }
    char *text = inrun_json_emit(v, NULL);
    if (strcmp(text, out) != 0) fprintf(stderr, "  got %s\n", text);
    check(strcmp(text, out) == 0, in);
    free(text);
}

static void rejects(const char *in) {
    const char *err = NULL;
    check(inrun_json_parse(in, strlen(in), &err) == NULL && err != NULL, in);
}

static void number(double d, const char *out) {
    char *text = inrun_json_emit(inrun_json_number(d), NULL);
    if (strcmp(text, out) != 0) fprintf(stderr, "  %.17g: got %s want %s\n", d, text, out);
    check(strcmp(text, out) == 0, out);
    free(text);
}

/* a log stub for native builds */
void inrun_log(inrun_log_level level, const char *message) { (void)level, (void)message; }

int main(void) {
    roundtrip(" { \"a\" : [1, -2, 3.5e10, true, false, null, \"x\"] } ", "{\"a\":[1,-2,3.5e10,true,false,null,\"x\"]}");
    roundtrip("\"\\u00e9\\u2603\\ud83d\\ude00\\n\\t\\\"\\\\\\/\"", "\"\xc3\xa9\xe2\x98\x83\xf0\x9f\x98\x80\\n\\t\\\"\\\\/\"");
    roundtrip("\"\\u0001\"", "\"\\u0001\"");
    roundtrip("{\"k\":1,\"k\":2}", "{\"k\":2}");
    roundtrip("[]", "[]");
    roundtrip("{}", "{}");
    roundtrip("18446744073709551616", "18446744073709551616");
    rejects("");
    rejects("{");
    rejects("[1,]");
    rejects("{\"a\":1,}");
    rejects("01");
    rejects("1.");
    rejects("\"\\ud800\"");
    rejects("\"a\nb\"");
    rejects("nul");
    rejects("1 2");
    rejects("\"\\x\"");
    char deep[400];
    memset(deep, '[', 200);
    memset(deep + 200, ']', 200);
    check(inrun_json_parse(deep, 400, NULL) == NULL, "too deep");

    const char *doc = "{\"metadata\":{\"labels\":{\"app.kubernetes.io/name\":\"shop\"}},\"l\":[{\"n\":\"a\"},{\"n\":\"b\"}]}";
    inrun_json *v = inrun_json_parse(doc, strlen(doc), NULL);
    check(strcmp(inrun_json_as_string(inrun_json_pointer(v, "/metadata/labels/app.kubernetes.io~1name")), "shop") == 0, "pointer ~1");
    check(strcmp(inrun_json_as_string(inrun_json_pointer(v, "/l/1/n")), "b") == 0, "pointer index");
    check(inrun_json_pointer(v, "/l/2/n") == NULL, "pointer out of range");
    check(inrun_json_pointer(v, "/l/01") == NULL, "pointer leading zero");
    check(inrun_json_pointer(v, "") == v, "pointer root");
    check(inrun_json_equal(v, inrun_json_clone(v)), "clone equal");
    inrun_json_set_int(inrun_json_object_field(v, "metadata"), "x", -9);
    check(inrun_json_remove(v, "l"), "remove");
    char *text = inrun_json_emit(v, NULL);
    check(strcmp(text, "{\"metadata\":{\"labels\":{\"app.kubernetes.io/name\":\"shop\"},\"x\":-9}}") == 0, text);
    free(text);
    int64_t i;
    check(inrun_json_as_int(inrun_json_parse("-9223372036854775808", 20, NULL), &i) && i == INT64_MIN, "int64 min");
    check(!inrun_json_as_int(inrun_json_parse("1.5", 3, NULL), &i), "1.5 is no int");

    number(0.1, "0.1");
    number(-2.5, "-2.5");
    number(1.0 / 3, "0.3333333333333333");
    number(1e-7, "1e-7");
    number(1.5e300, "1.5e300");
    number(123456.789, "123456.789");
    number(5e-324, "5e-324");
    number(1.7976931348623157e308, "1.7976931348623157e308");

    inrun_string_map m = {0};
    inrun_string_map_set(&m, "b", "2");
    inrun_string_map_set(&m, "a", "1");
    inrun_string_map_set(&m, "b", "3");
    check(m.len == 2 && strcmp(m.keys[0], "a") == 0 && strcmp(inrun_string_map_get(&m, "b"), "3") == 0, "string map");
    check(strcmp(inrun_errorf("%s=%d %zu %lld %x %%", "k", -4, (size_t)7, -5LL, 255u), "k=-4 7 -5 ff %") == 0, "errorf");

    inrun__arena_reset();
    printf("%d passed, %d failed\n", passes, failures);
    return failures != 0;
}
