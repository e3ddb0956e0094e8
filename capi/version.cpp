#include "loom.h"

extern "C" {

LOOM_API int32_t loom_version_number(void) { return LOOM_VERSION_NUMBER; }

LOOM_API const char* loom_version_string(void) { return LOOM_VERSION_STRING; }

}
