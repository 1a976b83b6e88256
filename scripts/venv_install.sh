#!/bin/sh
# Install into the virtualenv VENV: `venv_install.sh VENV PIP-ARGS...`. uv does it where
# the venv has it (a fresh install of the dev extras: about 10 s against pip's 45),
# pip where it does not.
VENV=$1
shift
if [ -x "$VENV/bin/uv" ]; then
    exec "$VENV/bin/uv" pip install -q --python "$VENV/bin/python" "$@"
fi
exec "$VENV/bin/python" -m pip install -q "$@"
