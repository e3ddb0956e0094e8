/*
 * loom.h — the stable C ABI of loom.
 *
 * Pure C99; includes only <stddef.h> and <stdint.h>. Every symbol is prefixed loom_ and
 * every macro LOOM_. Versioning: LOOM_VERSION_NUMBER = MAJOR*10000 + MINOR*100 + PATCH
 * is the header's version; loom_version_number() is the library's. A host checks that
 * their majors agree. The shared library's SONAME changes only when the ABI breaks.
 */
#ifndef LOOM_H
#define LOOM_H

#include <stddef.h>
#include <stdint.h>

#define LOOM_VERSION_MAJOR 0
#define LOOM_VERSION_MINOR 1
#define LOOM_VERSION_PATCH 0
#define LOOM_VERSION_NUMBER \
  (LOOM_VERSION_MAJOR * 10000 + LOOM_VERSION_MINOR * 100 + LOOM_VERSION_PATCH)

#if defined(LOOM_STATIC_DEFINE)
#define LOOM_API
#elif defined(LOOM_BUILDING_LIBRARY)
#define LOOM_API __attribute__((visibility("default")))
#else
#define LOOM_API
#endif

#if defined(__GNUC__)
#define LOOM_DEPRECATED(msg) __attribute__((deprecated(msg)))
#else
#define LOOM_DEPRECATED(msg)
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The library's version number (same encoding as LOOM_VERSION_NUMBER). Any thread. */
LOOM_API int32_t loom_version_number(void);
/* The library's version as "MAJOR.MINOR.PATCH"; a static string. Any thread. */
LOOM_API const char *loom_version_string(void);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_H */
