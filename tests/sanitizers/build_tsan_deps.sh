#!/usr/bin/env bash
# Builds the installed abseil's and gRPC's libraries with ThreadSanitizer,
# for tests/run.sh --sanitize thread.
#
#   tests/sanitizers/build_tsan_deps.sh DEST
#
# Why: TSan sees only the synchronization it instruments. absl::Mutex locks
# and unlocks inside libabsl_synchronization, and gRPC hands a callback from
# the thread that starts an operation to the thread that completes it
# through its own completion queues and combiners. Debian builds both without
# TSan, so every access those order (ours, and gRPC's own state in its
# headers) looks like a race. This fetches the source packages of the exact
# installed versions from Debian's archive (apt-get source, through a
# private deb-src list; nothing else is downloaded), applies Debian's patches
# and its build options (same SONAMEs, ABI-identical), builds the shared
# libraries with clang-14 -fsanitize=thread, and puts them in DEST/lib.
# Processes run with LD_LIBRARY_PATH=DEST/lib load them instead of the
# system's. All of abseil: a once-only initialization in an uninstrumented
# abseil library (absl::call_once) hides its edge as a mutex does. Of gRPC,
# the libraries our binaries load: grpc++, grpc, gpr, upb, address_sorting.
# Abseil takes about 1 minute on 2 cores, gRPC about 7.5 (measured in
# docs/testing.md). Each is skipped when DEST already holds this version's
# build.
set -euo pipefail
if [ $# -ne 1 ]; then echo "usage: $0 DEST" >&2; exit 2; fi
DEST="$(mkdir -p "$1" && cd "$1" && pwd)"
mkdir -p "$DEST/lib"
MULTIARCH=/usr/lib/x86_64-linux-gnu

# installed_version LIBRARY: the Debian version of the package that ships it.
installed_version() {
  local package
  package="$(dpkg -S "$(readlink -f "$MULTIARCH/$1")" | cut -d: -f1)"
  dpkg-query -W -f='${Version}' "$package"
}

# fetch_source PACKAGE VERSION WORK: unpacks Debian's source of PACKAGE at
# VERSION (a binNMU's +bN suffix names the same source) into WORK/PACKAGE.
fetch_source() {
  local package="$1" version="${2%+b*}" work="$3"
  rm -rf "$work" && mkdir -p "$work/apt/lists/partial"
  cat > "$work/apt/deb-src.sources" <<SOURCES
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
  local apt_private=(-o Dir::Etc::SourceList=/dev/null
                     -o "Dir::Etc::SourceParts=$work/apt"
                     -o "Dir::State::Lists=$work/apt/lists"
                     -o APT::Sandbox::User=root)
  apt-get "${apt_private[@]}" update -q
  (cd "$work" && apt-get "${apt_private[@]}" source --download-only \
    "$package=$version")
  (cd "$work" && dpkg-source -x --no-check "${package}"_*.dsc "$package")
}

# build_with_tsan NAME STAMP_LIBRARY SOURCE_PACKAGE CMAKE_TARGETS... -- CMAKE_ARGS...
# Builds, copies every shared library it made into DEST/lib, and checks that
# STAMP_LIBRARY's SONAME matches the system's.
build_with_tsan() {
  local name="$1" stamp_lib="$2" package="$3"
  shift 3
  local targets=()
  while [ "$1" != "--" ]; do targets+=("$1"); shift; done
  shift
  local version
  version="$(installed_version "$stamp_lib")"
  if [ "$(cat "$DEST/lib/.$name-version" 2>/dev/null)" = "$version" ]; then
    echo "$name $version with TSan: already built in $DEST/lib"
    return
  fi
  local work="$DEST/src-$name" started=$SECONDS
  fetch_source "$package" "$version" "$work"
  CXX=clang++-14 CC=clang-14 cmake -S "$work/$package" -B "$work/build" -G Ninja \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_STANDARD=17 -DBUILD_SHARED_LIBS=ON \
    -DBUILD_TESTING=OFF \
    -DCMAKE_C_FLAGS="-fsanitize=thread -fno-omit-frame-pointer" \
    -DCMAKE_CXX_FLAGS="-fsanitize=thread -fno-omit-frame-pointer" \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
    -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread" "$@"
  cmake --build "$work/build" -j2 ${targets[@]+--target "${targets[@]}"}
  find "$work/build" -name '*.so.*' -type f -exec cp {} "$DEST/lib/" \;
  # The SONAME links the loader follows.
  for built in "$DEST"/lib/*.so.*; do
    local soname
    soname="$(readelf -d "$built" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')"
    [ -n "$soname" ] && [ "$soname" != "$(basename "$built")" ] &&
      ln -sf "$(basename "$built")" "$DEST/lib/$soname"
  done
  if [ ! -e "$DEST/lib/$(basename "$(readlink "$MULTIARCH/$stamp_lib")")" ]; then
    echo "the TSan build of $name has no $(readlink "$MULTIARCH/$stamp_lib")" >&2
    exit 1
  fi
  echo "$version" > "$DEST/lib/.$name-version"
  rm -rf "$work"
  echo "$name $version with TSan: built in $((SECONDS - started)) s"
}

build_with_tsan abseil libabsl_synchronization.so abseil -- \
  -DABSL_ENABLE_INSTALL=ON

# Debian's options (debian/rules) for what our binaries load; no code
# generators or tests. CMake defines the generators' support library even
# when it builds none, and asks for libprotoc, which libprotoc-dev would
# provide: the runtime library satisfies the check and is never linked.
build_with_tsan grpc libgrpc.so grpc grpc++ grpc gpr upb address_sorting -- \
  -DProtobuf_PROTOC_LIBRARY="$(ls $MULTIARCH/libprotoc.so.* | head -1)" \
  -DgRPC_ABSL_PROVIDER=package -DgRPC_CARES_PROVIDER=package \
  -DgRPC_PROTOBUF_PROVIDER=package -DgRPC_RE2_PROVIDER=package \
  -DgRPC_SSL_PROVIDER=package -DgRPC_ZLIB_PROVIDER=package \
  -DgRPC_BACKWARDS_COMPATIBILITY_MODE=OFF -DgRPC_BUILD_TESTS=OFF \
  -DgRPC_BUILD_CODEGEN=OFF -DgRPC_INSTALL=OFF
