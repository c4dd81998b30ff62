#!/usr/bin/env bash
# Builds SONiC's YANG validator once from ../shared/sonic-yang, for the tests that validate rendered config_db.json
# files as a SONiC switch would (tests/test_sonic_yang.py): libyang 3.12.2 with SONiC's patches into
# .venv/opt/libyang, libyang-python 3.1.0 with SONiC's patches into .venv (linked to that library by rpath).
# Nothing is copied into the project; the models and sonic_yang stay in ../shared. Safe to run again: a stamp of
# the sources' digests makes it a no-op. Where ../shared/sonic-yang is absent it says so and does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

SRC=${AISITE_SONIC_YANG:-../shared/sonic-yang}
if [ ! -f "$SRC/libyang-3.12.2.tar.gz" ]; then
  echo "sonic-yang: $SRC is absent: SONiC YANG validation is not set up (its tests will say so)"
  exit 0
fi
PREFIX="$PWD/.venv/opt/libyang"
digest=$(cat "$SRC"/libyang-*.tar.gz "$SRC"/src/libyang3/patch/* "$SRC"/src/libyang3-py3/patch/* | sha256sum | cut -c1-16)
stamp=".venv/.aisite-sonic-yang-$digest"
if [ -f "$stamp" ]; then
  exit 0
fi
for tool in cmake cc make patch; do
  command -v "$tool" >/dev/null || { echo "sonic-yang: $tool is missing (make setup installs it as root)" >&2; exit 1; }
done

build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
patched() {  # patched <tarball> <patch dir>: extract and apply SONiC's patches in their series order
  tar -xzf "$1" -C "$build"
  local dir
  dir="$build/$(tar -tzf "$1" | head -1 | cut -d/ -f1)"
  while read -r p; do
    [ -n "$p" ] && patch -s -d "$dir" -p1 < "$2/$p"
  done < "$2/series"
  echo "$dir"
}

echo "sonic-yang: building libyang 3.12.2 with SONiC's patches"
ly=$(patched "$SRC/libyang-3.12.2.tar.gz" "$SRC/src/libyang3/patch")
cmake -S "$ly" -B "$ly/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$PREFIX" \
  -DENABLE_TESTS=OFF -DENABLE_VALGRIND_TESTS=OFF >"$build/cmake.log" 2>&1 || { cat "$build/cmake.log" >&2; exit 1; }
make -C "$ly/build" -j"$(nproc)" >"$build/make.log" 2>&1 || { tail -40 "$build/make.log" >&2; exit 1; }
make -C "$ly/build" install >/dev/null

echo "sonic-yang: building libyang-python 3.1.0 with SONiC's patches"
py=$(patched "$SRC/libyang-python-3.1.0.tar.gz" "$SRC/src/libyang3-py3/patch")
# PYTHONWARNINGS: setuptools' packaging-metadata deprecation notices about libyang-python's setup say nothing here.
LIBYANG_HEADERS="$PREFIX/include" LIBYANG_LIBRARIES="$PREFIX/lib" LIBYANG_EXTRA_LDFLAGS="-Wl,-rpath,$PREFIX/lib" \
  PYTHONWARNINGS=ignore .venv/bin/python -m pip -q --disable-pip-version-check install --no-build-isolation --no-deps "$py" \
  2> >(grep -v "is ignored: it is neither" >&2)
.venv/bin/python -c "import libyang" || { echo "sonic-yang: libyang-python does not import" >&2; exit 1; }
rm -f .venv/.aisite-sonic-yang-*
touch "$stamp"
echo "sonic-yang: done"
