#!/usr/bin/env bash
# Installs everything the tests need (the package with its test, parquet and local extras,
# plus the chat weights with --no-deps) and runs lint, types, the import contracts and the whole
# suite on every core (which builds the docs site with mkdocs build --strict: tests/test_docs_site.py).
# This is the README's second quick-start command; .ci/run runs it after the first one
# (install the offline models, run the example), in the same tree, as a newcomer does.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PYTHON="${PYTHON:-$(command -v python >/dev/null 2>&1 && echo python || echo python3)}"  # python3-only machines too

"$PYTHON" -m pip install --quiet --disable-pip-version-check -e ".[test,parquet]"
bash scripts/install-local.sh --quiet --disable-pip-version-check
# The report page's tests open it in a real headless Chromium (Debian's package): install it
# where apt-get can; without one those tests are skipped, saying so.
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO="sudo -n"
    { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium; } >/dev/null 2>&1 \
        || echo "could not install chromium: the report page's browser tests will be skipped" >&2
fi
"$PYTHON" -m ruff check genwire tests benchmarks
"$PYTHON" -m mypy
# lint-imports, through $PYTHON: the layers and no-cycle contracts of [tool.importlinter]
"$PYTHON" -c 'import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())' --no-cache
# The suite on every core (pytest-xdist): one worker per CPU; --dist loadgroup keeps each
# xdist_group (tests/conftest.py: ONE_WORKER, the Ray tests) on a single worker. Arguments
# given to this script come last and win (-n 0: one process, as before).
"$PYTHON" -m pytest -q -n auto --dist loadgroup "$@"
