/* A C99 host of the installed library: checks header and library versions agree. */
#include <loom.h>
#include <stdio.h>

int main(void) {
  const int32_t lib = loom_version_number();
  if (lib / 10000 != LOOM_VERSION_NUMBER / 10000) {
    fprintf(stderr, "major version mismatch: header %d, library %d\n", LOOM_VERSION_NUMBER, (int)lib);
    return 1;
  }
  printf("loom %s (header %d, library %d)\n", loom_version_string(), LOOM_VERSION_NUMBER, (int)lib);
  return 0;
}
