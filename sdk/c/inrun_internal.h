/* Inrun C SDK internals shared by its source files; not for plugins. */
#ifndef INRUN_INTERNAL_H
#define INRUN_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>

void inrun__arena_reset(void);
char *inrun__strndup(const char *s, size_t len);
const char *inrun__vformat(const char *fmt, va_list ap);

#endif
