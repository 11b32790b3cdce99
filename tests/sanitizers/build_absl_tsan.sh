#!/usr/bin/env bash
# Builds the installed abseil's libraries with ThreadSanitizer, for
# tests/run.sh --sanitize thread.
#
#   tests/sanitizers/build_absl_tsan.sh DEST
#
# Why: absl::Mutex locks and unlocks inside libabsl_synchronization. Debian
# builds it without TSan, so TSan never sees those happens-before edges and
# reports every access guarded by an absl::Mutex (ours and gRPC's, which
# uses absl::Mutex too) as a race. This fetches the source package of the
# exact installed version from Debian's archive (apt-get source, through a
# private deb-src list; nothing else is downloaded), applies Debian's
# patches (same SONAME and options, so it is ABI-identical), builds every
# abseil library as a shared library with clang-14 -fsanitize=thread, and
# puts them in DEST/lib. Processes run with LD_LIBRARY_PATH=DEST/lib load
# them instead of the system's. All of them: a once-only initialization in
# an uninstrumented abseil library (absl::call_once) hides its edge from
# TSan just as a mutex does. About 3 minutes on 2 cores. Does nothing when
# DEST already holds this version's build.
set -euo pipefail
if [ $# -ne 1 ]; then echo "usage: $0 DEST" >&2; exit 2; fi
DEST="$(mkdir -p "$1" && cd "$1" && pwd)"
lib="$(readlink -f /usr/lib/x86_64-linux-gnu/libabsl_synchronization.so)"
package="$(dpkg -S "$lib" | cut -d: -f1)"
version="$(dpkg-query -W -f='${Version}' "$package")"
if [ -f "$DEST/lib/.version" ] && [ "$(cat "$DEST/lib/.version")" = "$version" ]; then
  echo "abseil $version with TSan: already built in $DEST/lib"
  exit 0
fi

work="$DEST/src"
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
apt_private=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$work/apt"
             -o "Dir::State::Lists=$work/apt/lists" -o APT::Sandbox::User=root)
apt-get "${apt_private[@]}" update -q
(cd "$work" && apt-get "${apt_private[@]}" source --download-only "abseil=$version")
(cd "$work" && dpkg-source -x --no-check abseil_*.dsc abseil)

CXX=clang++-14 CC=clang-14 cmake -S "$work/abseil" -B "$work/build" -G Ninja \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_STANDARD=17 -DBUILD_SHARED_LIBS=ON \
  -DABSL_ENABLE_INSTALL=ON -DBUILD_TESTING=OFF \
  -DCMAKE_CXX_FLAGS="-fsanitize=thread -fno-omit-frame-pointer" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread"
cmake --build "$work/build" -j2

rm -rf "$DEST/lib" && mkdir -p "$DEST/lib"
find "$work/build" -name 'libabsl_*.so.*' -exec cp -a {} "$DEST/lib/" \;
soname="$(readelf -d "$DEST/lib/libabsl_synchronization.so."*.0.0 | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')"
if [ "$soname" != "$(basename "$(readlink /usr/lib/x86_64-linux-gnu/libabsl_synchronization.so)")" ]; then
  echo "the TSan build's SONAME $soname differs from the system's" >&2
  exit 1
fi
echo "$version" > "$DEST/lib/.version"
rm -rf "$work"
echo "abseil $version with TSan: $(ls "$DEST/lib" | grep -c 'so\.[0-9]*$') libraries in $DEST/lib"
