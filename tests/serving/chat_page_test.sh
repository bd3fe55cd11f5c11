#!/usr/bin/env bash
# Runs chat_page_test.mjs: the chat page at / in headless Chromium (Debian's
# chromium package, or $CHROMIUM, driven by the npm package playwright-core,
# pinned major, installed into WORK/node_modules once). Skips (exit 77) with a
# message when chromium, node, npm or the network is missing.
# usage: chat_page_test.sh INFER FIXTURES WORK
set -euo pipefail
infer=$1 fixtures=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
model=$fixtures/models/tiny-pycode-target
chromium=${CHROMIUM:-$(command -v chromium || echo /usr/bin/chromium)}
if [ ! -f "$model/config.json" ]; then
  echo "fixture missing: $model; skipping"; exit 77
fi
if [ ! -x "$chromium" ]; then
  echo "$chromium is not installed (apt-get install chromium); skipping the chat page test"; exit 77
fi
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "node or npm is not installed; skipping the chat page test"; exit 77
fi
mkdir -p "$work"
if [ ! -f "$work/node_modules/playwright-core/package.json" ]; then
  if ! (cd "$work" && npm install --no-audit --no-fund --silent playwright-core@1 >npm.log 2>&1); then
    echo "npm install playwright-core failed (no network?); skipping:"; tail -5 "$work/npm.log"; exit 77
  fi
fi
if [ ! -f "$work/tiny/manifest.json" ]; then
  "$infer" compile "$model" -o "$work/tiny" >/dev/null
fi
printf '%s' '{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>{{ m.content }}
{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}' > "$work/chat.jinja"
exec node "$here/chat_page_test.mjs" "$infer" "$work/tiny" "$work/chat.jinja" \
  "$work/node_modules" "$chromium"
