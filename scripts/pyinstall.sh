# Sourced by bootstrap.sh, oldest.sh and ecosystem.sh: `pyinstall VENV LOG PIP-INSTALL-ARGS...`
# installs into VENV with uv, plain pip when uv fails; exits with the log's tail when both fail.
#
# uv installs a pinned set several times faster than pip (it unpacks wheels in parallel) and
# hard-links the files from its cache, so a second environment (the oldest one) or a fresh clone
# costs little disk where pip keeps a copy of every download besides the installed files (torch
# with its CUDA libraries is several GB). uv reads no pip configuration, so it is handed the
# package sources and constraints pip is set up with on this machine.

pip_setting() {  # VENV OPTION: the value pip uses: its PIP_* variable, else its configuration
  local var
  var="PIP_$(echo "$2" | tr 'a-z-' 'A-Z_')"
  if [ -n "${!var:-}" ]; then echo "${!var}"; else "$1/bin/python" -m pip config get "global.$2" 2>/dev/null || true; fi
}

pyinstall() {
  local venv=$1 log=$2
  shift 2
  local pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
  local args=(--python "$venv/bin/python" --index-strategy unsafe-best-match)
  local v
  for v in $(pip_setting "$venv" index-url); do args+=(--index-url "$v"); done
  for v in $(pip_setting "$venv" extra-index-url); do args+=(--extra-index-url "$v"); done
  for v in $(pip_setting "$venv" find-links); do args+=(--find-links "$v"); done
  for v in $(pip_setting "$venv" constraint); do args+=(-c "$v"); done
  if "${pip[@]}" install -c constraints.txt uv >"$log" 2>&1 \
      && "$venv/bin/uv" pip install "${args[@]}" "$@" >>"$log" 2>&1; then
    return 0
  fi
  echo "uv failed (log: $log); installing with pip" >&2
  if ! "${pip[@]}" install "$@" >"$log" 2>&1; then
    grep -v 'is ignored: it is neither a file nor a directory' "$log" | tail -30 >&2
    echo "error: pip install failed (full log: $log)" >&2
    exit 1
  fi
}

# The environments' stamps (bootstrap.sh, oldest.sh, ecosystem.sh): an environment is set up
# again when the files it was installed from change.
stamp_of() {  # FILES...: what an environment installed from FILES is stamped with
  cat "$@" | sha256sum | cut -d' ' -f1
}

current() {  # VENV STAMP WANT: VENV has a python and its STAMP file says WANT
  [ -x "$1/bin/python" ] && [ -f "$2" ] && [ "$(cat "$2")" = "$3" ]
}

venv_at() {  # VENV: a virtual environment there, made with $PYTHON if missing (the caller's say)
  [ -x "$1/bin/python" ] || { say "creating $1"; "$PYTHON" -m venv "$1"; }
}
