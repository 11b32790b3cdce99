# BLAKE3 from Debian: the official C implementation ships inside
# librust-blake3-dev, under /usr/share/cargo/registry/blake3-<version>/c/.
# Debian has no libblake3-dev, so this builds those sources (never copied
# into this repository) as the static library `fg_blake3`: the portable code
# plus, on x86-64, the SSE2, SSE4.1, AVX2 and AVX-512 assembly, chosen at run
# time by the library's own CPU dispatch.
#
# FEDGATHER_BLAKE3_SOURCE_DIR overrides where the C sources are looked for.

if(NOT FEDGATHER_BLAKE3_SOURCE_DIR)
  file(GLOB _fg_blake3_candidates LIST_DIRECTORIES true
       /usr/share/cargo/registry/blake3-*/c)
  list(SORT _fg_blake3_candidates COMPARE NATURAL ORDER DESCENDING)
  foreach(_dir IN LISTS _fg_blake3_candidates)
    if(EXISTS "${_dir}/blake3.h" AND EXISTS "${_dir}/blake3_dispatch.c")
      set(_fg_blake3_found "${_dir}")
      break()
    endif()
  endforeach()
  set(FEDGATHER_BLAKE3_SOURCE_DIR "${_fg_blake3_found}" CACHE PATH
      "The BLAKE3 C sources (Debian's librust-blake3-dev installs them under /usr/share/cargo/registry/blake3-*/c)")
endif()
if(NOT EXISTS "${FEDGATHER_BLAKE3_SOURCE_DIR}/blake3.h")
  message(FATAL_ERROR
    "fedgather needs the BLAKE3 C sources, which Debian ships in the package "
    "librust-blake3-dev (/usr/share/cargo/registry/blake3-*/c/blake3.h), and "
    "none were found (FEDGATHER_BLAKE3_SOURCE_DIR='${FEDGATHER_BLAKE3_SOURCE_DIR}'). "
    "Install them with: apt-get install --no-install-recommends librust-blake3-dev "
    "(deploy/install-deps.sh does), or point FEDGATHER_BLAKE3_SOURCE_DIR at "
    "another copy of BLAKE3's c/ folder.")
endif()

set(_fg_blake3 "${FEDGATHER_BLAKE3_SOURCE_DIR}")
set(_fg_blake3_sources
  "${_fg_blake3}/blake3.c"
  "${_fg_blake3}/blake3_dispatch.c"
  "${_fg_blake3}/blake3_portable.c")
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  enable_language(ASM)
  list(APPEND _fg_blake3_sources
    "${_fg_blake3}/blake3_sse2_x86-64_unix.S"
    "${_fg_blake3}/blake3_sse41_x86-64_unix.S"
    "${_fg_blake3}/blake3_avx2_x86-64_unix.S"
    "${_fg_blake3}/blake3_avx512_x86-64_unix.S")
  set(_fg_blake3_defines "")
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64)$")
  list(APPEND _fg_blake3_sources "${_fg_blake3}/blake3_neon.c")
  set(_fg_blake3_defines BLAKE3_USE_NEON=1)
else()
  # Portable code only.
  set(_fg_blake3_defines BLAKE3_NO_SSE2 BLAKE3_NO_SSE41 BLAKE3_NO_AVX2
      BLAKE3_NO_AVX512)
endif()
add_library(fg_blake3 STATIC ${_fg_blake3_sources})
target_include_directories(fg_blake3 SYSTEM PUBLIC "${_fg_blake3}")
target_compile_definitions(fg_blake3 PRIVATE ${_fg_blake3_defines})
set_target_properties(fg_blake3 PROPERTIES POSITION_INDEPENDENT_CODE ON
                                           C_STANDARD 99)
message(STATUS "BLAKE3 C sources: ${_fg_blake3}")
