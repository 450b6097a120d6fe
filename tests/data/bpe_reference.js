// tests/data/bpe_reference.js — the reference side of tests/data/bpe_test.cc (BpeReference): OpenAI's
// tokenizer core, npm's tiktoken (its Rust core compiled to WebAssembly), encodes texts with its
// "gpt2" encoding.
//   node bpe_reference.js NPM_DIR OUT FILE...
// NPM_DIR holds node_modules/tiktoken (`make deps` installs it into third_party/npm). For each FILE,
// read as UTF-8: each of its lines (the text split at "\n", the newline left out, so a file ending in
// a newline ends with an empty line), then the whole file. OUT gets one line per text, in that order:
// the ids separated by spaces (an empty line for an empty text). encode_ordinary: special tokens such
// as "<|endoftext|>" in the text are plain text, as tfm's ByteLevelBpe::encode treats them.
"use strict";
const fs = require("fs");
const path = require("path");
const [npmDir, out, ...files] = process.argv.slice(2);
const { get_encoding } = require(path.join(path.resolve(npmDir), "node_modules", "tiktoken"));
const enc = get_encoding("gpt2");
const rows = [];
for (const f of files) {
  const text = fs.readFileSync(f, "utf8");
  for (const line of text.split("\n")) rows.push(Array.from(enc.encode_ordinary(line)).join(" "));
  rows.push(Array.from(enc.encode_ordinary(text)).join(" "));
}
enc.free();
fs.writeFileSync(out, rows.join("\n") + "\n");
