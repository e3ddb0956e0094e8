# Every dependency comes from Debian 12's packages (cmake/bootstrap-deps.sh installs
# them); nothing is downloaded at configure time.
find_package(Threads REQUIRED)
find_package(Eigen3 3.4 REQUIRED NO_MODULE)
find_package(simdjson REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(PkgConfig REQUIRED)
# PCRE2 gives the pre-tokenizers Unicode property classes (\p{L}, \p{N}) that
# std::regex lacks; hand-writing those tables would be thousands of lines to get wrong.
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
# utf8proc gives the tokenizer normalizers real Unicode NFC/NFD/NFKC/NFKD composition,
# case mapping and general categories (Qwen2's tokenizer.json normalizes to NFC).
pkg_check_modules(UTF8PROC REQUIRED IMPORTED_TARGET libutf8proc)
# OpenSSL's libcrypto (Debian's libssl-dev) hashes weight files and packs with the CPU's
# SHA extensions: 5-6x the hand-written SHA-256 it replaced, per thread.
find_package(OpenSSL 3 REQUIRED COMPONENTS Crypto)
if(LOOM_BUILD_TESTS)
  find_package(Catch2 2 REQUIRED)
endif()
if(LOOM_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()
# cpp-httplib (Debian's libcpp-httplib-dev, as llama.cpp's server uses it) for `loom serve`
# (examples/server). Debian ships it compiled, with TLS and compression built in: its
# pkg-config flags (CPPHTTPLIB_OPENSSL_SUPPORT, ...) change the layout of httplib's
# structs, so they must be used as given. Absent: loom builds without the server.
if(LOOM_BUILD_EXAMPLES)
  pkg_check_modules(HTTPLIB IMPORTED_TARGET cpp-httplib)
  if(NOT HTTPLIB_FOUND)
    message(STATUS "cpp-httplib not found (apt-get install libcpp-httplib-dev): `loom serve` is not built")
  endif()
endif()
