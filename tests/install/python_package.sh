#!/usr/bin/env bash
# The Python package as a Debian user installs it: numpy is a declared dependency (pip will not
# install the package into a Python that lacks it and cannot get it), the venv way of
# docs/python.md works, and a library that cannot be loaded is named with PIPEBENCH_LIBRARY and
# every place tried.
. "$(dirname "$0")/../cli/lib.sh"
py=${PIPEBENCH_PYTHON:-/usr/bin/python3}
lib=${PIPEBENCH_TEST_LIBRARY:?the path of libpipebench.so}
src=$(cd "$(dirname "$0")/../.." && pwd)

# The wheel's metadata declares numpy.
mkdir -p "$work/wheel"
if (cd "$src/python" && "$py" -c 'import sys; sys.path.insert(0, "_build"); import pipebench_build; print(pipebench_build.build_wheel(sys.argv[1]))' "$work/wheel") >"$work/wheel.out" 2>&1; then
  whl=$work/wheel/$(tail -n1 "$work/wheel.out")
  "$py" -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); print(z.read([n for n in z.namelist() if n.endswith("METADATA")][0]).decode())' "$whl" >"$work/meta"
  grep -qx 'Requires-Dist: numpy' "$work/meta" && pass || fail "wheel declares numpy: $(cat "$work/meta")"
else
  rc=1; out=$(cat "$work/wheel.out"); errout=""; fail "the wheel builds"
fi

# A library that cannot be loaded: the message names PIPEBENCH_LIBRARY and the places tried.
mkdir -p "$work/alone"
cp -r "$src/python/pipebench" "$work/alone/"
run env -u PIPEBENCH_LIBRARY -u PIPEBENCH_LIB PATH=/usr/bin:/bin PYTHONPATH="$work/alone" "$py" -c 'import pipebench'
[[ $rc -ne 0 ]] && pass || fail "import without a library fails"
expect_err "PIPEBENCH_LIBRARY \(not set\)" "names PIPEBENCH_LIBRARY"
expect_err "Places tried, in order: .*$work/build/libpipebench.so" "lists the places tried"
run env PIPEBENCH_LIBRARY="$work/nowhere/libpipebench.so" PYTHONPATH="$work/alone" "$py" -c 'import pipebench'
expect_err "PIPEBENCH_LIBRARY=$work/nowhere/libpipebench.so" "names the variable's value"
run env PIPEBENCH_LIBRARY="$lib" PYTHONPATH="$work/alone" "$py" -c 'import pipebench; print(pipebench.library_path())'
expect_rc 0 "PIPEBENCH_LIBRARY is used"

# The venv way of docs/python.md: --system-site-packages sees Debian's numpy; pip installs the
# package offline. Without the system's packages numpy is missing and pip refuses.
if "$py" -m venv --system-site-packages "$work/venv" >/dev/null 2>&1 && [[ -x $work/venv/bin/pip ]]; then
  run "$work/venv/bin/pip" install --no-index --disable-pip-version-check "$src/python"
  expect_rc 0 "pip install into a venv with the system's numpy"
  run env PIPEBENCH_LIBRARY="$lib" "$work/venv/bin/python" -c 'import pipebench, numpy; print(pipebench.library_path())'
  expect_rc 0 "import pipebench in the venv"
  if "$py" -m venv "$work/bare" >/dev/null 2>&1 && [[ -x $work/bare/bin/pip ]]; then
    run "$work/bare/bin/pip" install --no-index --disable-pip-version-check "$src/python"
    [[ $rc -ne 0 ]] && pass || fail "pip installs the package where numpy cannot be had"
    expect_err "numpy" "pip names numpy"
  fi
else
  echo "note: $py -m venv is not available here; the venv checks are skipped"
fi
finish
