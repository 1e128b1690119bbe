# Sourced by ./run-suite and ./run-tests: install what is missing, nothing when present.
# - torch: only when no torch is importable (never replaces an installed torch or
#   torch_npu); HARNESS_TORCH_VERSION (default 2.13.0) and HARNESS_TORCH_INDEX (e.g.
#   https://download.pytorch.org/whl/cpu for a CPU build) choose which.
# - the project and its dependencies: `pip install -e .` (".[test]" for the tests) only
#   when one of them does not import; pip keeps the installed torch (the project asks
#   only torch>=2.1).
# Sets PY to the interpreter to use (PYTHON, default python3).
PY=${PYTHON:-python3}
_mode=${1:-suite}
_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
    if "$PY" -c "import importlib.util,sys; sys.exit(importlib.util.find_spec('torch') is None)" \
        >/dev/null 2>&1; then
        echo "setup: torch is installed but does not import; not replacing it." >&2
        echo "setup: run 'python -m harness doctor' for the reason and the fix" >&2
        "$PY" -c "import torch" || true
        exit 1
    fi
    echo "setup: no torch is importable; installing torch==${HARNESS_TORCH_VERSION:-2.13.0}"
    "$PY" -m pip install --quiet "torch==${HARNESS_TORCH_VERSION:-2.13.0}" \
        ${HARNESS_TORCH_INDEX:+--index-url "$HARNESS_TORCH_INDEX"}
fi
_needs="import harness, filelock, hypothesis, numpy, pytest, pytest_benchmark, scipy, expecttest"
_extra=""
if [ "$_mode" = "test" ]; then
    _needs="$_needs, xdist, pytest_timeout, matplotlib"
    _extra="[test]"
fi
if ! (cd "$_root" && "$PY" -c "$_needs" >/dev/null 2>&1); then
    echo "setup: installing the project and its dependencies (pip install -e '.${_extra}')"
    (cd "$_root" && "$PY" -m pip install --quiet -e ".${_extra}")
fi
unset _mode _needs _extra
