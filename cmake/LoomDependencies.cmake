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
if(LOOM_BUILD_TESTS)
  find_package(Catch2 2 REQUIRED)
endif()
if(LOOM_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()
