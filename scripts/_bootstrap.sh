# shellcheck shell=bash
# Sourced by the scripts in this directory (scripts/proxy, scripts/test); not meant to be run.
#
# 1. Finds a Python >= 3.12 (only when .venv has to be created), trying in order:
#    $TOOLID_PYTHON, python3.14, python3.13, python3.12, python3 on PATH, then
#    ${PYENV_ROOT:-~/.pyenv}/versions/3.1[2-9]*/bin/python3 (newest first). Every candidate
#    is run to check its version: pyenv shims exist on PATH even when they cannot run.
# 2. Creates <repo>/.venv on first use and runs `pip install -e '.[dev]'` into it (which also
#    builds the optional native accelerator, toolid/_native.c, when a C compiler is there);
#    re-installs when pyproject.toml, setup.py or toolid/_native.c is newer than
#    .venv/.toolid-installed; recreates .venv when its python is missing or broken, or when
#    the venv was created for another checkout (copied or moved).
# 3. Exports TOOLID_ROOT (repo root), TOOLID_VENV (<root>/.venv) and TOOLID_VENV_PYTHON.
#
# Only bash builtins run until an interpreter is found, so the "no Python" error is reported
# properly even with a minimal PATH. Errors go to stderr and exit the calling script with 1.

_toolid_err() { printf 'toolid: %s\n' "$*" >&2; }
_toolid_die() {
    _toolid_err "$@"
    exit 1
}

# _toolid_probe PY: run PY and report its version in _toolid_probe_ver ("3.12.1") and
# _toolid_probe_key (sortable integer). Returns 0 if PY is a Python >= 3.12 that can create
# venvs, 2 if it is >= 3.12 but lacks the venv/ensurepip modules, 1 otherwise.
_toolid_probe() {
    local out maj min mic venv_ok
    _toolid_probe_ver="" _toolid_probe_key=0
    out=$("$1" -c 'import importlib.util as u, sys
v = sys.version_info
ok = int(bool(u.find_spec("venv") and u.find_spec("ensurepip")))
print(v[0], v[1], v[2], ok)' </dev/null 2>/dev/null) || return 1
    read -r maj min mic venv_ok <<<"$out" || true
    [[ $maj =~ ^[0-9]+$ && $min =~ ^[0-9]+$ && $mic =~ ^[0-9]+$ ]] || return 1
    _toolid_probe_ver="$maj.$min.$mic"
    _toolid_probe_key=$((maj * 1000000 + min * 1000 + mic))
    ((maj > 3 || (maj == 3 && min >= 12))) || return 1
    [[ $venv_ok == 1 ]] || return 2
    return 0
}

# _toolid_find_python: sets _toolid_base_python or exits with a clear message.
_toolid_find_python() {
    local cand path rc best="" best_key=0 best_ver="" tried=() novenv=()
    _toolid_base_python=""

    if [[ -n ${TOOLID_PYTHON:-} ]]; then
        if path=$(command -v -- "$TOOLID_PYTHON"); then
            rc=0
            _toolid_probe "$path" || rc=$?
            if ((rc == 0)); then
                _toolid_base_python=$path
                return 0
            fi
            if ((rc == 2)); then novenv+=("$path"); fi
        fi
        _toolid_err "warning: TOOLID_PYTHON=$TOOLID_PYTHON is not a usable Python >= 3.12; ignoring it"
        tried+=("TOOLID_PYTHON=$TOOLID_PYTHON")
    fi

    for cand in python3.14 python3.13 python3.12 python3; do
        if ! path=$(command -v -- "$cand"); then
            tried+=("$cand (not on PATH)")
            continue
        fi
        rc=0
        _toolid_probe "$path" || rc=$?
        if ((rc == 0)); then
            _toolid_base_python=$path
            return 0
        fi
        if ((rc == 2)); then novenv+=("$path"); fi
        tried+=("$path (${_toolid_probe_ver:-does not run})")
    done

    local pyenv_root=${PYENV_ROOT:-${HOME:-}/.pyenv}
    for cand in "$pyenv_root"/versions/3.1[2-9]*/bin/python3; do
        [[ -x $cand ]] || continue
        rc=0
        _toolid_probe "$cand" || rc=$?
        if ((rc == 0)); then
            if ((_toolid_probe_key > best_key)); then
                best=$cand best_key=$_toolid_probe_key best_ver=$_toolid_probe_ver
            fi
        else
            if ((rc == 2)); then novenv+=("$cand"); fi
            tried+=("$cand (${_toolid_probe_ver:-does not run})")
        fi
    done
    tried+=("$pyenv_root/versions/3.1[2-9]*/bin/python3")
    if [[ -n $best ]]; then
        _toolid_base_python=$best _toolid_probe_ver=$best_ver
        return 0
    fi

    _toolid_err "no Python >= 3.12 found (toolid needs one to create $TOOLID_VENV)."
    local joined="" item
    for item in "${tried[@]}"; do joined+="${joined:+, }$item"; done
    _toolid_err "tried: $joined"
    if ((${#novenv[@]})); then
        _toolid_err "found Python >= 3.12 without the venv/ensurepip modules: ${novenv[*]}"
        _toolid_err "(on Debian/Ubuntu install the matching python3.X-venv package)"
    fi
    _toolid_die "install Python 3.12 or newer, or set TOOLID_PYTHON=/path/to/python3.12"
}

# _toolid_venv_problem: prints why the existing .venv cannot be used (nothing if it is fine).
_toolid_venv_problem() {
    local stamp_root="" rc=0
    if [[ ! -x $TOOLID_VENV_PYTHON ]]; then
        printf 'it has no %s' "$TOOLID_VENV_PYTHON"
        return 0
    fi
    _toolid_probe "$TOOLID_VENV_PYTHON" || rc=$?
    if ((rc == 1)); then
        printf 'its python does not run or is older than 3.12 (%s)' "${_toolid_probe_ver:-broken}"
        return 0
    fi
    if [[ -f $_toolid_stamp ]]; then
        IFS= read -r stamp_root <"$_toolid_stamp" || true
        if [[ $stamp_root != "$TOOLID_ROOT" ]]; then
            printf 'it was created for %s' "${stamp_root:-another checkout}"
            return 0
        fi
    fi
}

_toolid_bootstrap() {
    local src=${BASH_SOURCE[0]} dir problem
    if [[ $src == */* ]]; then dir=${src%/*}; else dir=.; fi
    TOOLID_ROOT=$(cd -P -- "$dir/.." && pwd) || _toolid_die "cannot find the repo root from $src"
    TOOLID_VENV=$TOOLID_ROOT/.venv
    TOOLID_VENV_PYTHON=$TOOLID_VENV/bin/python
    _toolid_stamp=$TOOLID_VENV/.toolid-installed
    export TOOLID_ROOT TOOLID_VENV TOOLID_VENV_PYTHON

    [[ -f $TOOLID_ROOT/pyproject.toml ]] || _toolid_die "no pyproject.toml in $TOOLID_ROOT"

    if [[ -e $TOOLID_VENV || -L $TOOLID_VENV ]]; then
        problem=$(_toolid_venv_problem)
        if [[ -n $problem ]]; then
            _toolid_err "$TOOLID_VENV is unusable ($problem); recreating it"
            rm -rf -- "$TOOLID_VENV" || _toolid_die "cannot remove $TOOLID_VENV"
        fi
    fi

    if [[ ! -e $TOOLID_VENV ]]; then
        _toolid_find_python
        _toolid_err "creating $TOOLID_VENV with $_toolid_base_python (Python $_toolid_probe_ver)"
        "$_toolid_base_python" -m venv -- "$TOOLID_VENV" >&2 ||
            _toolid_die "'$_toolid_base_python -m venv $TOOLID_VENV' failed"
    fi

    local built changed=""
    for built in pyproject.toml setup.py toolid/_native.c; do
        if [[ -f $_toolid_stamp && $TOOLID_ROOT/$built -nt $_toolid_stamp ]]; then changed=$built; fi
    done
    if [[ ! -f $_toolid_stamp ]]; then
        _toolid_err "installing toolid with its dev extras into $TOOLID_VENV (the first time takes about a minute)"
    elif [[ -n $changed ]]; then
        _toolid_err "$changed changed: reinstalling toolid with its dev extras into $TOOLID_VENV"
    fi
    if [[ ! -f $_toolid_stamp || -n $changed ]]; then
        rm -f -- "$_toolid_stamp"
        "$TOOLID_VENV_PYTHON" -m pip install -qq --disable-pip-version-check --no-input \
            -e "${TOOLID_ROOT}[dev]" >&2 ||
            _toolid_die "'pip install -e .[dev]' failed (see above); fix it and re-run"
        printf '%s\n' "$TOOLID_ROOT" >"$_toolid_stamp" || _toolid_die "cannot write $_toolid_stamp"
    fi
}

_toolid_bootstrap
