#!/usr/bin/env bash
# Runs openai_sdk_test.mjs: installs the `openai` npm package (pinned major)
# into WORK/node_modules once, and skips (exit 77) with a message when node,
# npm or the network is missing.
# usage: openai_sdk_test.sh INFER FIXTURES WORK
set -euo pipefail
infer=$1 fixtures=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
model=$fixtures/models/tiny-pycode-target
if [ ! -f "$model/config.json" ]; then
  echo "fixture missing: $model; skipping"; exit 77
fi
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "node or npm is not installed; skipping the OpenAI SDK test"; exit 77
fi
mkdir -p "$work"
if [ ! -f "$work/node_modules/openai/package.json" ]; then
  if ! (cd "$work" && npm install --no-audit --no-fund --silent openai@4 >npm.log 2>&1); then
    echo "npm install openai failed (no network?); skipping:"; tail -5 "$work/npm.log"; exit 77
  fi
fi
if [ ! -f "$work/tiny/manifest.json" ]; then
  "$infer" compile "$model" -o "$work/tiny" >/dev/null
fi
printf '%s' '{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>{{ m.content }}
{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}' > "$work/chat.jinja"
exec node "$here/openai_sdk_test.mjs" "$infer" "$work/tiny" "$work/chat.jinja" "$work/node_modules"
