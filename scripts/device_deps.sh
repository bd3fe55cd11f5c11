#!/usr/bin/env bash
#===- device_deps.sh - Headers and libraries for a GPU host without them -===#
#
# Usage (on this Debian machine, from the repository root):
#   scripts/device_deps.sh [DEST]            (default .deps)
#
# The GPU machine (Ubuntu 24.04 with the CUDA toolkit, cmake, ninja, python3)
# builds the runtime with -DINFER_ENABLE_COMPILER=OFF but has no PCRE2, ICU
# headers, GoogleTest, nlohmann/json or Boost headers, and cannot install
# packages. This copies what the runtime's build needs from the Debian
# packages scripts/bootstrap.sh installs into DEST, which is git-ignored and
# carried to the GPU machine with the working tree:
#
#   DEST/include   pcre2.h, nlohmann/, xxhash.h, gtest/, gmock/, unicode/ (ICU headers
#                  renamed to the host's ICU 74 symbols), boost/ (only the
#                  headers the runtime includes, found by the preprocessor)
#   DEST/lib       libpcre2-8.a, libgtest*.a, libgmock*.a
#   DEST/cmake     nlohmann_jsonConfig.cmake (an INTERFACE target)
#   DEST/pkgconfig libpcre2-8.pc, icu-uc.pc (paths rewritten at use by
#                  tests/runtime/cuda/gpu_check.sh)
#   DEST/bin/pkg-config  a python3 stand-in answering CMake's FindPkgConfig
#                  queries from DEST/pkgconfig, for hosts without pkg-config
#
#===----------------------------------------------------------------------===#
set -euo pipefail
cd "$(dirname "$0")/.."
D=${1:-.deps}
rm -rf "$D"
mkdir -p "$D/include" "$D/lib" "$D/cmake" "$D/pkgconfig" "$D/bin"
LIB=/usr/lib/x86_64-linux-gnu

cp /usr/include/pcre2.h "$D/include/"
cp "$LIB/libpcre2-8.a" "$D/lib/"
cp -r /usr/include/nlohmann "$D/include/"
cp /usr/include/xxhash.h "$D/include/" # header-only (XXH_INLINE_ALL)
cp -r /usr/include/gtest /usr/include/gmock "$D/include/"
cp "$LIB"/libgtest.a "$LIB"/libgtest_main.a "$LIB"/libgmock.a \
  "$LIB"/libgmock_main.a "$D/lib/"

# ICU's C API renames every symbol with its major version (u_foo_72): the
# host's libicuuc.so.74 exports *_74, and the normalization API the
# tokenizer uses is the same in both, so the headers are renamed to 74.
cp -r /usr/include/unicode "$D/include/"
sed -i -e 's/#define U_ICU_VERSION_MAJOR_NUM 72/#define U_ICU_VERSION_MAJOR_NUM 74/' \
  -e 's/#define U_ICU_VERSION_SUFFIX _72/#define U_ICU_VERSION_SUFFIX _74/' \
  "$D/include/unicode/uvernum.h"

# Boost: the header closure of the runtime's users of Boost (header-only).
boost_users=$(git ls-files 'runtime/*.cpp' 'runtime/*.h' 'tools/*.cpp' |
  xargs grep -l '#include <boost/' 2>/dev/null || true)
if [ -n "$boost_users" ]; then
  for f in $boost_users; do
    g++ -std=c++17 -I. -M -MT x "$f" 2>/dev/null | tr ' \\' '\n\n' |
      grep '^/usr/include/boost/' || true
  done | sort -u | while read -r h; do
    dest="$D/include/${h#/usr/include/}"
    mkdir -p "$(dirname "$dest")"
    cp "$h" "$dest"
  done
fi

cat >"$D/cmake/nlohmann_jsonConfig.cmake" <<'EOF'
if(NOT TARGET nlohmann_json::nlohmann_json)
  add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
  set_target_properties(nlohmann_json::nlohmann_json PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${CMAKE_CURRENT_LIST_DIR}/../include")
endif()
set(nlohmann_json_FOUND TRUE)
EOF
printf 'set(PACKAGE_VERSION 3.11.2)\nset(PACKAGE_VERSION_COMPATIBLE TRUE)\n' \
  >"$D/cmake/nlohmann_jsonConfigVersion.cmake"

cat >"$D/bin/pkg-config" <<'EOF'
#!/usr/bin/env python3
# A stand-in for pkg-config over the .pc files of PKG_CONFIG_PATH: the
# queries CMake's FindPkgConfig makes (--version, --exists, --modversion,
# --variable, --cflags[-only-I|-only-other], --libs[-only-L|-only-l|-only-other]).
import os, re, sys
args = [a for a in sys.argv[1:] if a != "--print-errors"]
if args == ["--version"]:
    print("0.29.2"); sys.exit(0)
mods, opts = [a for a in args if not a.startswith("-")], [a for a in args if a.startswith("-")]
def load(name):
    for d in os.environ.get("PKG_CONFIG_PATH", "").split(":"):
        p = os.path.join(d, re.split(r"[ <>=]", name)[0] + ".pc")
        if os.path.exists(p):
            fields, var = {}, {}
            for line in open(p):
                line = line.strip()
                m = re.match(r"^(\w+)\s*=\s*(.*)$", line)
                if m: var[m.group(1)] = m.group(2); continue
                m = re.match(r"^([\w.]+):\s*(.*)$", line)
                if m: fields[m.group(1)] = re.sub(r"\$\{(\w+)\}", lambda v: var.get(v.group(1), ""), m.group(2))
            return fields, var
    return None
pcs = [load(m) for m in mods]
if any(p is None for p in pcs): sys.exit(1)
out = []
for fields, var in pcs:
    cflags, libs = fields.get("Cflags", "").split(), fields.get("Libs", "").split()
    for o in opts:
        if o == "--modversion": out.append(fields.get("Version", ""))
        elif o.startswith("--variable="): out.append(var.get(o.split("=", 1)[1], ""))
        elif o == "--cflags": out += cflags
        elif o == "--cflags-only-I": out += [c for c in cflags if c.startswith("-I")]
        elif o == "--cflags-only-other": out += [c for c in cflags if not c.startswith("-I")]
        elif o == "--libs": out += libs
        elif o == "--libs-only-L": out += [l for l in libs if l.startswith("-L")]
        elif o == "--libs-only-l": out += [l for l in libs if l.startswith("-l")]
        elif o == "--libs-only-other": out += [l for l in libs if not l.startswith(("-L", "-l"))]
print(" ".join(out))
EOF
chmod +x "$D/bin/pkg-config"
du -sh "$D"
