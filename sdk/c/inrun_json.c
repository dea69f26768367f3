/*
 * Inrun C SDK: the per-call arena, a small JSON reader/writer, string maps and the
 * message formatter. No WASI imports: only memory and string functions of libc.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "inrun.h"
#include "inrun_internal.h"

/* ---------------------------------------------------------------------------- arena */

typedef struct chunk {
    struct chunk *next;
    size_t used, size;
    /* data follows, 16-byte aligned */
} chunk;

#define CHUNK_HEADER ((sizeof(chunk) + 15) & ~(size_t)15)
#define CHUNK_SIZE (64 * 1024)

static chunk *arena_head;

void *inrun_alloc(size_t size) {
    size = (size + 15) & ~(size_t)15;
    if (size == 0) size = 16;
    if (!arena_head || arena_head->size - arena_head->used < size) {
        size_t want = size > CHUNK_SIZE ? size : CHUNK_SIZE;
        chunk *c = malloc(CHUNK_HEADER + want);
        if (!c) __builtin_trap(); /* out of memory: the host reports the memory cap */
        c->used = 0;
        c->size = want;
        if (size > CHUNK_SIZE / 4 && arena_head) {
            /* a big block gets its own chunk behind the current one, keeping its space */
            c->next = arena_head->next;
            arena_head->next = c;
        } else {
            c->next = arena_head;
            arena_head = c;
        }
        c->used = size;
        void *p = (char *)c + CHUNK_HEADER;
        memset(p, 0, size);
        return p;
    }
    void *p = (char *)arena_head + CHUNK_HEADER + arena_head->used;
    arena_head->used += size;
    memset(p, 0, size);
    return p;
}

void inrun__arena_reset(void) {
    chunk *c = arena_head;
    while (c) {
        chunk *next = c->next;
        free(c);
        c = next;
    }
    arena_head = NULL;
}

char *inrun__strndup(const char *s, size_t len) {
    char *p = inrun_alloc(len + 1);
    memcpy(p, s, len);
    p[len] = 0;
    return p;
}

char *inrun_strdup(const char *s) { return inrun__strndup(s, strlen(s)); }

/* ----------------------------------------------------------------------- values */

struct inrun_json {
    inrun_json_kind kind;
    union {
        bool b;
        struct {
            bool is_int;
            int64_t i;
            double d;
            const char *raw; /* the text it was parsed from, emitted verbatim */
            size_t raw_len;
        } num;
        struct {
            char *s;
            size_t len;
        } str;
        struct {
            inrun_json **items;
            size_t len, cap;
        } arr;
        struct {
            char **keys;
            size_t *key_lens;
            inrun_json **values;
            size_t len, cap;
        } obj;
    } u;
};

static inrun_json *new_value(inrun_json_kind kind) {
    inrun_json *v = inrun_alloc(sizeof(inrun_json));
    v->kind = kind;
    return v;
}

inrun_json *inrun_json_null(void) { return new_value(INRUN_JSON_NULL); }

inrun_json *inrun_json_bool(bool b) {
    inrun_json *v = new_value(INRUN_JSON_BOOL);
    v->u.b = b;
    return v;
}

inrun_json *inrun_json_int(int64_t i) {
    inrun_json *v = new_value(INRUN_JSON_NUMBER);
    v->u.num.is_int = true;
    v->u.num.i = i;
    v->u.num.d = (double)i;
    return v;
}

inrun_json *inrun_json_number(double d) {
    inrun_json *v = new_value(INRUN_JSON_NUMBER);
    v->u.num.d = d;
    if (d >= -9.2e18 && d <= 9.2e18 && (double)(int64_t)d == d) {
        v->u.num.is_int = true;
        v->u.num.i = (int64_t)d;
    }
    return v;
}

inrun_json *inrun_json_stringn(const char *s, size_t len) {
    inrun_json *v = new_value(INRUN_JSON_STRING);
    v->u.str.s = inrun__strndup(s, len);
    v->u.str.len = len;
    return v;
}

inrun_json *inrun_json_string(const char *s) { return inrun_json_stringn(s, strlen(s)); }
inrun_json *inrun_json_array(void) { return new_value(INRUN_JSON_ARRAY); }
inrun_json *inrun_json_object(void) { return new_value(INRUN_JSON_OBJECT); }

inrun_json_kind inrun_json_kind_of(const inrun_json *v) { return v ? v->kind : INRUN_JSON_NULL; }
bool inrun_json_is_null(const inrun_json *v) { return !v || v->kind == INRUN_JSON_NULL; }
bool inrun_json_is_string(const inrun_json *v) { return v && v->kind == INRUN_JSON_STRING; }
bool inrun_json_is_object(const inrun_json *v) { return v && v->kind == INRUN_JSON_OBJECT; }
bool inrun_json_is_array(const inrun_json *v) { return v && v->kind == INRUN_JSON_ARRAY; }

const char *inrun_json_as_string(const inrun_json *v) {
    return inrun_json_is_string(v) ? v->u.str.s : NULL;
}

bool inrun_json_as_int(const inrun_json *v, int64_t *out) {
    if (!v || v->kind != INRUN_JSON_NUMBER || !v->u.num.is_int) return false;
    if (out) *out = v->u.num.i;
    return true;
}

bool inrun_json_as_number(const inrun_json *v, double *out) {
    if (!v || v->kind != INRUN_JSON_NUMBER) return false;
    if (out) *out = v->u.num.d;
    return true;
}

bool inrun_json_as_bool(const inrun_json *v, bool *out) {
    if (!v || v->kind != INRUN_JSON_BOOL) return false;
    if (out) *out = v->u.b;
    return true;
}

size_t inrun_json_len(const inrun_json *v) {
    if (inrun_json_is_array(v)) return v->u.arr.len;
    if (inrun_json_is_object(v)) return v->u.obj.len;
    return 0;
}

inrun_json *inrun_json_at(const inrun_json *arr, size_t i) {
    return inrun_json_is_array(arr) && i < arr->u.arr.len ? arr->u.arr.items[i] : NULL;
}

const char *inrun_json_key_at(const inrun_json *obj, size_t i) {
    return inrun_json_is_object(obj) && i < obj->u.obj.len ? obj->u.obj.keys[i] : NULL;
}

inrun_json *inrun_json_value_at(const inrun_json *obj, size_t i) {
    return inrun_json_is_object(obj) && i < obj->u.obj.len ? obj->u.obj.values[i] : NULL;
}

static long find_key(const inrun_json *obj, const char *key, size_t len) {
    for (size_t i = 0; i < obj->u.obj.len; i++)
        if (obj->u.obj.key_lens[i] == len && memcmp(obj->u.obj.keys[i], key, len) == 0)
            return (long)i;
    return -1;
}

inrun_json *inrun_json_get(const inrun_json *obj, const char *key) {
    if (!inrun_json_is_object(obj) || !key) return NULL;
    long i = find_key(obj, key, strlen(key));
    return i < 0 ? NULL : obj->u.obj.values[i];
}

inrun_json *inrun_json_pointer(const inrun_json *v, const char *pointer) {
    if (!v || !pointer) return NULL;
    const char *p = pointer;
    while (*p) {
        if (*p != '/') return NULL;
        p++;
        /* unescape one reference token: ~1 is '/', ~0 is '~' */
        const char *end = p;
        while (*end && *end != '/') end++;
        size_t n = (size_t)(end - p);
        char *token = inrun_alloc(n + 1);
        size_t t = 0;
        for (const char *q = p; q < end; q++) {
            if (*q == '~' && q + 1 < end && (q[1] == '0' || q[1] == '1')) {
                token[t++] = q[1] == '0' ? '~' : '/';
                q++;
            } else {
                token[t++] = *q;
            }
        }
        if (v->kind == INRUN_JSON_OBJECT) {
            long i = find_key(v, token, t);
            if (i < 0) return NULL;
            v = v->u.obj.values[i];
        } else if (v->kind == INRUN_JSON_ARRAY) {
            if (t == 0 || (t > 1 && token[0] == '0')) return NULL;
            size_t idx = 0;
            for (size_t k = 0; k < t; k++) {
                if (token[k] < '0' || token[k] > '9' || idx > (SIZE_MAX - 9) / 10) return NULL;
                idx = idx * 10 + (size_t)(token[k] - '0');
            }
            if (idx >= v->u.arr.len) return NULL;
            v = v->u.arr.items[idx];
        } else {
            return NULL;
        }
        p = end;
    }
    return (inrun_json *)v;
}

static void *grow(void *old, size_t old_count, size_t new_count, size_t elem) {
    void *p = inrun_alloc(new_count * elem);
    if (old_count) memcpy(p, old, old_count * elem);
    return p;
}

inrun_json *inrun_json_push(inrun_json *arr, inrun_json *item) {
    if (!inrun_json_is_array(arr) || !item) return arr;
    if (arr->u.arr.len == arr->u.arr.cap) {
        size_t cap = arr->u.arr.cap ? arr->u.arr.cap * 2 : 4;
        arr->u.arr.items = grow(arr->u.arr.items, arr->u.arr.len, cap, sizeof(inrun_json *));
        arr->u.arr.cap = cap;
    }
    arr->u.arr.items[arr->u.arr.len++] = item;
    return arr;
}

static void object_put(inrun_json *obj, char *key, size_t len, inrun_json *value) {
    long i = find_key(obj, key, len);
    if (i >= 0) {
        obj->u.obj.values[i] = value;
        return;
    }
    if (obj->u.obj.len == obj->u.obj.cap) {
        size_t cap = obj->u.obj.cap ? obj->u.obj.cap * 2 : 4, n = obj->u.obj.len;
        obj->u.obj.keys = grow(obj->u.obj.keys, n, cap, sizeof(char *));
        obj->u.obj.key_lens = grow(obj->u.obj.key_lens, n, cap, sizeof(size_t));
        obj->u.obj.values = grow(obj->u.obj.values, n, cap, sizeof(inrun_json *));
        obj->u.obj.cap = cap;
    }
    obj->u.obj.keys[obj->u.obj.len] = key;
    obj->u.obj.key_lens[obj->u.obj.len] = len;
    obj->u.obj.values[obj->u.obj.len] = value;
    obj->u.obj.len++;
}

inrun_json *inrun_json_set(inrun_json *obj, const char *key, inrun_json *value) {
    if (!inrun_json_is_object(obj) || !key || !value) return obj;
    size_t len = strlen(key);
    object_put(obj, inrun__strndup(key, len), len, value);
    return obj;
}

bool inrun_json_remove(inrun_json *obj, const char *key) {
    if (!inrun_json_is_object(obj) || !key) return false;
    long i = find_key(obj, key, strlen(key));
    if (i < 0) return false;
    size_t rest = obj->u.obj.len - (size_t)i - 1;
    memmove(&obj->u.obj.keys[i], &obj->u.obj.keys[i + 1], rest * sizeof(char *));
    memmove(&obj->u.obj.key_lens[i], &obj->u.obj.key_lens[i + 1], rest * sizeof(size_t));
    memmove(&obj->u.obj.values[i], &obj->u.obj.values[i + 1], rest * sizeof(inrun_json *));
    obj->u.obj.len--;
    return true;
}

inrun_json *inrun_json_object_field(inrun_json *obj, const char *key) {
    if (!inrun_json_is_object(obj)) return NULL;
    inrun_json *field = inrun_json_get(obj, key);
    if (!inrun_json_is_object(field)) {
        field = inrun_json_object();
        inrun_json_set(obj, key, field);
    }
    return field;
}

inrun_json *inrun_json_set_string(inrun_json *obj, const char *key, const char *s) {
    return inrun_json_set(obj, key, inrun_json_string(s));
}

inrun_json *inrun_json_set_int(inrun_json *obj, const char *key, int64_t i) {
    return inrun_json_set(obj, key, inrun_json_int(i));
}

inrun_json *inrun_json_set_bool(inrun_json *obj, const char *key, bool b) {
    return inrun_json_set(obj, key, inrun_json_bool(b));
}

inrun_json *inrun_json_clone(const inrun_json *v) {
    if (!v) return NULL;
    inrun_json *c = new_value(v->kind);
    switch (v->kind) {
    case INRUN_JSON_NULL:
        break;
    case INRUN_JSON_BOOL:
        c->u.b = v->u.b;
        break;
    case INRUN_JSON_NUMBER:
        c->u.num = v->u.num;
        break;
    case INRUN_JSON_STRING:
        c->u.str.s = inrun__strndup(v->u.str.s, v->u.str.len);
        c->u.str.len = v->u.str.len;
        break;
    case INRUN_JSON_ARRAY:
        for (size_t i = 0; i < v->u.arr.len; i++) inrun_json_push(c, inrun_json_clone(v->u.arr.items[i]));
        break;
    case INRUN_JSON_OBJECT:
        for (size_t i = 0; i < v->u.obj.len; i++)
            object_put(c, inrun__strndup(v->u.obj.keys[i], v->u.obj.key_lens[i]), v->u.obj.key_lens[i],
                       inrun_json_clone(v->u.obj.values[i]));
        break;
    }
    return c;
}

bool inrun_json_equal(const inrun_json *a, const inrun_json *b) {
    if (!a || !b) return a == b;
    if (a->kind != b->kind) return false;
    switch (a->kind) {
    case INRUN_JSON_NULL:
        return true;
    case INRUN_JSON_BOOL:
        return a->u.b == b->u.b;
    case INRUN_JSON_NUMBER:
        if (a->u.num.is_int && b->u.num.is_int) return a->u.num.i == b->u.num.i;
        return a->u.num.d == b->u.num.d;
    case INRUN_JSON_STRING:
        return a->u.str.len == b->u.str.len && memcmp(a->u.str.s, b->u.str.s, a->u.str.len) == 0;
    case INRUN_JSON_ARRAY:
        if (a->u.arr.len != b->u.arr.len) return false;
        for (size_t i = 0; i < a->u.arr.len; i++)
            if (!inrun_json_equal(a->u.arr.items[i], b->u.arr.items[i])) return false;
        return true;
    case INRUN_JSON_OBJECT:
        if (a->u.obj.len != b->u.obj.len) return false;
        for (size_t i = 0; i < a->u.obj.len; i++) {
            long j = find_key(b, a->u.obj.keys[i], a->u.obj.key_lens[i]);
            if (j < 0 || !inrun_json_equal(a->u.obj.values[i], b->u.obj.values[j])) return false;
        }
        return true;
    }
    return false;
}

/* ----------------------------------------------------------------------- parser */

#define MAX_DEPTH 128

typedef struct {
    const char *s;
    size_t len, pos;
    const char *err;
} parser;

static bool fail(parser *p, const char *what) {
    if (!p->err) p->err = inrun_errorf("%s at byte %zu", what, p->pos);
    return false;
}

static void skip_ws(parser *p) {
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static bool literal(parser *p, const char *word) {
    size_t n = strlen(word);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0) return fail(p, "invalid literal");
    p->pos += n;
    return true;
}

static int hex4(parser *p) {
    if (p->len - p->pos < 4) return -1;
    int v = 0;
    for (int k = 0; k < 4; k++) {
        char c = p->s[p->pos + k];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= c - '0';
        else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
        else return -1;
    }
    p->pos += 4;
    return v;
}

static size_t put_utf8(char *out, uint32_t cp) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Parses a string at p->pos (on the opening quote) into an arena buffer. */
static bool parse_string(parser *p, char **out, size_t *out_len) {
    p->pos++; /* opening quote */
    size_t start = p->pos;
    /* the decoded text is never longer than the raw text: size the buffer by a scan */
    size_t end = start;
    while (end < p->len && p->s[end] != '"') end += p->s[end] == '\\' ? 2 : 1;
    if (end >= p->len) return fail(p, "unterminated string");
    char *buf = inrun_alloc(end - start + 1);
    size_t n = 0;
    while (p->pos < p->len) {
        unsigned char c = (unsigned char)p->s[p->pos];
        if (c == '"') {
            p->pos++;
            buf[n] = 0;
            *out = buf;
            *out_len = n;
            return true;
        }
        if (c < 0x20) return fail(p, "control character in string");
        if (c != '\\') {
            buf[n++] = (char)c;
            p->pos++;
            continue;
        }
        p->pos++;
        if (p->pos >= p->len) break;
        char e = p->s[p->pos++];
        switch (e) {
        case '"': buf[n++] = '"'; break;
        case '\\': buf[n++] = '\\'; break;
        case '/': buf[n++] = '/'; break;
        case 'b': buf[n++] = '\b'; break;
        case 'f': buf[n++] = '\f'; break;
        case 'n': buf[n++] = '\n'; break;
        case 'r': buf[n++] = '\r'; break;
        case 't': buf[n++] = '\t'; break;
        case 'u': {
            int hi = hex4(p);
            if (hi < 0) return fail(p, "invalid \\u escape");
            uint32_t cp = (uint32_t)hi;
            if (hi >= 0xD800 && hi <= 0xDBFF) {
                if (p->len - p->pos < 2 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u')
                    return fail(p, "lone surrogate in string");
                p->pos += 2;
                int lo = hex4(p);
                if (lo < 0xDC00 || lo > 0xDFFF) return fail(p, "lone surrogate in string");
                cp = 0x10000 + (((uint32_t)hi - 0xD800) << 10) + ((uint32_t)lo - 0xDC00);
            } else if (hi >= 0xDC00 && hi <= 0xDFFF) {
                return fail(p, "lone surrogate in string");
            }
            /* \uXXXX is 6 raw bytes (12 for a pair) and at most 4 decoded: it fits */
            n += put_utf8(buf + n, cp);
            break;
        }
        default:
            p->pos--;
            return fail(p, "invalid escape in string");
        }
    }
    return fail(p, "unterminated string");
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

static inrun_json *parse_number(parser *p) {
    size_t start = p->pos;
    bool is_int = true;
    if (p->pos < p->len && p->s[p->pos] == '-') p->pos++;
    if (p->pos >= p->len || !is_digit(p->s[p->pos])) return fail(p, "invalid number"), NULL;
    if (p->s[p->pos] == '0') {
        p->pos++;
    } else {
        while (p->pos < p->len && is_digit(p->s[p->pos])) p->pos++;
    }
    if (p->pos < p->len && p->s[p->pos] == '.') {
        is_int = false;
        p->pos++;
        if (p->pos >= p->len || !is_digit(p->s[p->pos])) return fail(p, "invalid number"), NULL;
        while (p->pos < p->len && is_digit(p->s[p->pos])) p->pos++;
    }
    if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        is_int = false;
        p->pos++;
        if (p->pos < p->len && (p->s[p->pos] == '+' || p->s[p->pos] == '-')) p->pos++;
        if (p->pos >= p->len || !is_digit(p->s[p->pos])) return fail(p, "invalid number"), NULL;
        while (p->pos < p->len && is_digit(p->s[p->pos])) p->pos++;
    }
    inrun_json *v = new_value(INRUN_JSON_NUMBER);
    size_t n = p->pos - start;
    char *raw = inrun__strndup(p->s + start, n);
    v->u.num.raw = raw;
    v->u.num.raw_len = n;
    v->u.num.d = strtod(raw, NULL);
    if (is_int) {
        /* exact int64 when it fits */
        const char *q = raw;
        bool neg = *q == '-';
        if (neg) q++;
        uint64_t mag = 0;
        bool fits = true;
        for (; *q; q++) {
            uint64_t digit = (uint64_t)(*q - '0');
            if (mag > (UINT64_MAX - digit) / 10) {
                fits = false;
                break;
            }
            mag = mag * 10 + digit;
        }
        if (fits && (neg ? mag <= (uint64_t)INT64_MAX + 1 : mag <= (uint64_t)INT64_MAX)) {
            v->u.num.is_int = true;
            v->u.num.i = neg ? (int64_t)(0 - mag) : (int64_t)mag;
        }
    }
    return v;
}

static inrun_json *parse_value(parser *p, int depth) {
    if (depth > MAX_DEPTH) return fail(p, "nesting too deep"), NULL;
    skip_ws(p);
    if (p->pos >= p->len) return fail(p, "unexpected end of input"), NULL;
    char c = p->s[p->pos];
    switch (c) {
    case 'n':
        return literal(p, "null") ? inrun_json_null() : NULL;
    case 't':
        return literal(p, "true") ? inrun_json_bool(true) : NULL;
    case 'f':
        return literal(p, "false") ? inrun_json_bool(false) : NULL;
    case '"': {
        inrun_json *v = new_value(INRUN_JSON_STRING);
        return parse_string(p, &v->u.str.s, &v->u.str.len) ? v : NULL;
    }
    case '[': {
        inrun_json *arr = inrun_json_array();
        p->pos++;
        skip_ws(p);
        if (p->pos < p->len && p->s[p->pos] == ']') {
            p->pos++;
            return arr;
        }
        for (;;) {
            inrun_json *item = parse_value(p, depth + 1);
            if (!item) return NULL;
            inrun_json_push(arr, item);
            skip_ws(p);
            if (p->pos >= p->len) return fail(p, "unterminated array"), NULL;
            if (p->s[p->pos] == ',') {
                p->pos++;
                continue;
            }
            if (p->s[p->pos] == ']') {
                p->pos++;
                return arr;
            }
            return fail(p, "expected ',' or ']'"), NULL;
        }
    }
    case '{': {
        inrun_json *obj = inrun_json_object();
        p->pos++;
        skip_ws(p);
        if (p->pos < p->len && p->s[p->pos] == '}') {
            p->pos++;
            return obj;
        }
        for (;;) {
            skip_ws(p);
            if (p->pos >= p->len || p->s[p->pos] != '"') return fail(p, "expected a key string"), NULL;
            char *key;
            size_t key_len;
            if (!parse_string(p, &key, &key_len)) return NULL;
            skip_ws(p);
            if (p->pos >= p->len || p->s[p->pos] != ':') return fail(p, "expected ':'"), NULL;
            p->pos++;
            inrun_json *value = parse_value(p, depth + 1);
            if (!value) return NULL;
            object_put(obj, key, key_len, value); /* a repeated key: the last one wins */
            skip_ws(p);
            if (p->pos >= p->len) return fail(p, "unterminated object"), NULL;
            if (p->s[p->pos] == ',') {
                p->pos++;
                continue;
            }
            if (p->s[p->pos] == '}') {
                p->pos++;
                return obj;
            }
            return fail(p, "expected ',' or '}'"), NULL;
        }
    }
    default:
        if (c == '-' || is_digit(c)) return parse_number(p);
        return fail(p, "unexpected character"), NULL;
    }
}

inrun_json *inrun_json_parse(const char *text, size_t len, const char **err) {
    parser p = {text, len, 0, NULL};
    inrun_json *v = parse_value(&p, 0);
    if (v) {
        skip_ws(&p);
        if (p.pos != p.len) {
            fail(&p, "trailing characters");
            v = NULL;
        }
    }
    if (!v && err) *err = p.err ? p.err : "invalid JSON";
    return v;
}

/* ----------------------------------------------------------------------- writer */

typedef struct {
    char *buf;
    size_t len, cap;
} sbuf;

static void sb_reserve(sbuf *b, size_t more) {
    if (b->len + more + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + more + 1) cap *= 2;
    char *n = realloc(b->buf, cap);
    if (!n) __builtin_trap();
    b->buf = n;
    b->cap = cap;
}

static void sb_put(sbuf *b, const char *s, size_t n) {
    sb_reserve(b, n);
    memcpy(b->buf + b->len, s, n);
    b->len += n;
}

static void sb_ch(sbuf *b, char c) { sb_put(b, &c, 1); }

static void sb_u64(sbuf *b, uint64_t v) {
    char tmp[24];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    sb_reserve(b, n);
    while (n) b->buf[b->len++] = tmp[--n];
}

static void sb_i64(sbuf *b, int64_t v) {
    if (v < 0) {
        sb_ch(b, '-');
        sb_u64(b, (uint64_t)0 - (uint64_t)v);
    } else {
        sb_u64(b, (uint64_t)v);
    }
}

static void emit_string(sbuf *b, const char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    sb_ch(b, '"');
    size_t run = 0; /* bytes copied in one go */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        sb_put(b, s + run, i - run);
        run = i + 1;
        switch (c) {
        case '"': sb_put(b, "\\\"", 2); break;
        case '\\': sb_put(b, "\\\\", 2); break;
        case '\n': sb_put(b, "\\n", 2); break;
        case '\r': sb_put(b, "\\r", 2); break;
        case '\t': sb_put(b, "\\t", 2); break;
        case '\b': sb_put(b, "\\b", 2); break;
        case '\f': sb_put(b, "\\f", 2); break;
        default: {
            char u[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            sb_put(b, u, 6);
        }
        }
    }
    sb_put(b, s + run, n - run);
    sb_ch(b, '"');
}

/* `d` (finite, not an integer in int64 range) with the fewest significant digits that
 * read back as the same double. Digits come from long double (binary128 on wasm32), so
 * no printf is linked (printf would import WASI's fd_write). */
static void emit_double(sbuf *b, double d) {
    char digits[20];
    int exp10 = 0, ndigits = 0;
    if (d < 0) {
        sb_ch(b, '-');
        d = -d;
    }
    long double m = d;
    while (m >= 10) {
        m /= 10;
        exp10++;
    }
    while (m < 1) {
        m *= 10;
        exp10--;
    }
    const int base = exp10;
    for (int p = 1; p <= 17; p++) {
        /* p significant digits, rounded half up */
        long double x = m;
        int e = base;
        for (int i = 0; i < p; i++) {
            int digit = (int)x;
            digits[i] = (char)('0' + digit);
            x = (x - digit) * 10;
        }
        if (x >= 5) {
            int i = p - 1;
            while (i >= 0 && digits[i] == '9') digits[i--] = '0';
            if (i >= 0) {
                digits[i]++;
            } else {
                memmove(digits + 1, digits, (size_t)p - 1);
                digits[0] = '1';
                e++;
            }
        }
        /* does it read back? build "D.DDDe<e>" and compare */
        char tmp[40];
        size_t n = 0;
        tmp[n++] = digits[0];
        tmp[n++] = '.';
        for (int i = 1; i < p; i++) tmp[n++] = digits[i];
        tmp[n++] = '0';
        tmp[n++] = 'e';
        int ae = e < 0 ? -e : e;
        if (e < 0) tmp[n++] = '-';
        if (ae >= 100) tmp[n++] = (char)('0' + ae / 100);
        if (ae >= 10) tmp[n++] = (char)('0' + ae / 10 % 10);
        tmp[n++] = (char)('0' + ae % 10);
        tmp[n] = 0;
        ndigits = p;
        exp10 = e;
        if (strtod(tmp, NULL) == d) break;
    }
    while (ndigits > 1 && digits[ndigits - 1] == '0') ndigits--;
    if (exp10 >= -5 && exp10 < 17) {
        /* plain decimal */
        if (exp10 < 0) {
            sb_put(b, "0.", 2);
            for (int i = -1; i > exp10; i--) sb_ch(b, '0');
            sb_put(b, digits, (size_t)ndigits);
        } else {
            for (int i = 0; i <= exp10 || i < ndigits; i++) {
                if (i == exp10 + 1) sb_ch(b, '.');
                sb_ch(b, i < ndigits ? digits[i] : '0');
            }
            if (ndigits <= exp10 + 1) sb_put(b, ".0", 2);
        }
    } else {
        sb_ch(b, digits[0]);
        if (ndigits > 1) {
            sb_ch(b, '.');
            sb_put(b, digits + 1, (size_t)ndigits - 1);
        }
        sb_ch(b, 'e');
        sb_i64(b, exp10);
    }
}

static void emit(sbuf *b, const inrun_json *v) {
    if (!v) {
        sb_put(b, "null", 4);
        return;
    }
    switch (v->kind) {
    case INRUN_JSON_NULL:
        sb_put(b, "null", 4);
        break;
    case INRUN_JSON_BOOL:
        if (v->u.b) sb_put(b, "true", 4);
        else sb_put(b, "false", 5);
        break;
    case INRUN_JSON_NUMBER:
        if (v->u.num.raw) {
            sb_put(b, v->u.num.raw, v->u.num.raw_len);
        } else if (v->u.num.is_int) {
            sb_i64(b, v->u.num.i);
        } else if (v->u.num.d != v->u.num.d || v->u.num.d - v->u.num.d != 0) {
            sb_put(b, "null", 4); /* NaN and infinities are not JSON */
        } else {
            emit_double(b, v->u.num.d);
        }
        break;
    case INRUN_JSON_STRING:
        emit_string(b, v->u.str.s, v->u.str.len);
        break;
    case INRUN_JSON_ARRAY:
        sb_ch(b, '[');
        for (size_t i = 0; i < v->u.arr.len; i++) {
            if (i) sb_ch(b, ',');
            emit(b, v->u.arr.items[i]);
        }
        sb_ch(b, ']');
        break;
    case INRUN_JSON_OBJECT:
        sb_ch(b, '{');
        for (size_t i = 0; i < v->u.obj.len; i++) {
            if (i) sb_ch(b, ',');
            emit_string(b, v->u.obj.keys[i], v->u.obj.key_lens[i]);
            sb_ch(b, ':');
            emit(b, v->u.obj.values[i]);
        }
        sb_ch(b, '}');
        break;
    }
}

char *inrun_json_emit(const inrun_json *v, size_t *len) {
    sbuf b = {0};
    emit(&b, v);
    sb_reserve(&b, 0);
    b.buf[b.len] = 0;
    if (len) *len = b.len;
    return b.buf;
}

/* ------------------------------------------------------------------ string maps */

const char *inrun_string_map_get(const inrun_string_map *m, const char *key) {
    for (size_t i = 0; i < m->len; i++)
        if (strcmp(m->keys[i], key) == 0) return m->values[i];
    return NULL;
}

void inrun_string_map_set(inrun_string_map *m, const char *key, const char *value) {
    size_t i = 0;
    while (i < m->len && strcmp(m->keys[i], key) < 0) i++;
    if (i < m->len && strcmp(m->keys[i], key) == 0) {
        m->values[i] = inrun_strdup(value);
        return;
    }
    if (m->len == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 4;
        m->keys = grow(m->keys, m->len, cap, sizeof(char *));
        m->values = grow(m->values, m->len, cap, sizeof(char *));
        m->cap = cap;
    }
    memmove(&m->keys[i + 1], &m->keys[i], (m->len - i) * sizeof(char *));
    memmove(&m->values[i + 1], &m->values[i], (m->len - i) * sizeof(char *));
    m->keys[i] = inrun_strdup(key);
    m->values[i] = inrun_strdup(value);
    m->len++;
}

/* -------------------------------------------------------------------- formatting */

/* A small vsnprintf for messages (no floating point), writing into an arena string. */
const char *inrun__vformat(const char *fmt, va_list ap) {
    sbuf b = {0};
    for (const char *f = fmt; *f; f++) {
        if (*f != '%') {
            sb_ch(&b, *f);
            continue;
        }
        f++;
        int longs = 0;
        bool size = false;
        while (*f == 'l') {
            longs++;
            f++;
        }
        if (*f == 'z') {
            size = true;
            f++;
        }
        switch (*f) {
        case '%': sb_ch(&b, '%'); break;
        case 'c': sb_ch(&b, (char)va_arg(ap, int)); break;
        case 's': {
            const char *s = va_arg(ap, const char *);
            if (!s) s = "(null)";
            sb_put(&b, s, strlen(s));
            break;
        }
        case 'd':
        case 'i':
            if (size) sb_i64(&b, (int64_t)va_arg(ap, long));
            else if (longs >= 2) sb_i64(&b, va_arg(ap, long long));
            else if (longs == 1) sb_i64(&b, va_arg(ap, long));
            else sb_i64(&b, va_arg(ap, int));
            break;
        case 'u':
            if (size) sb_u64(&b, va_arg(ap, size_t));
            else if (longs >= 2) sb_u64(&b, va_arg(ap, unsigned long long));
            else if (longs == 1) sb_u64(&b, va_arg(ap, unsigned long));
            else sb_u64(&b, va_arg(ap, unsigned int));
            break;
        case 'x': {
            uint64_t v = size ? va_arg(ap, size_t)
                         : longs >= 2 ? va_arg(ap, unsigned long long)
                         : longs == 1 ? va_arg(ap, unsigned long)
                                      : va_arg(ap, unsigned int);
            char tmp[17];
            int n = 0;
            do {
                tmp[n++] = "0123456789abcdef"[v & 15];
                v >>= 4;
            } while (v);
            while (n) sb_ch(&b, tmp[--n]);
            break;
        }
        case 0:
            f--;
            break;
        default:
            sb_ch(&b, '?');
        }
    }
    char *out = inrun__strndup(b.buf ? b.buf : "", b.len);
    free(b.buf);
    return out;
}

const char *inrun_errorf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const char *s = inrun__vformat(fmt, ap);
    va_end(ap);
    return s;
}
