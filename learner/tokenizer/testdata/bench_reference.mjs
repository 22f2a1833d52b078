// Times Hugging Face's Tokenizers.js encoding testdata/bench.txt with the
// same fixtures as BenchmarkEncode, for the side-by-side figure in README.
//
//   cd learner/tokenizer && node testdata/bench_reference.mjs [/tmp/tokref/node_modules]
import fs from "fs";
import path from "path";

const modules = process.argv[2] ?? "/tmp/tokref/node_modules";
const { Tokenizer } = await import(path.join(modules, "@huggingface/tokenizers/dist/tokenizers.mjs"));
const text = fs.readFileSync("testdata/bench.txt", "utf8");
const bytes = Buffer.byteLength(text, "utf8");
for (const name of ["qwen2", "qwen2-nfc", "llama3", "builtin"]) {
  const tok = new Tokenizer(JSON.parse(fs.readFileSync(`testdata/${name}.tokenizer.json`, "utf8")), {});
  tok.encode(text, { add_special_tokens: false }); // warm caches and the JIT
  const n = 20;
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < n; i++) tok.encode(text, { add_special_tokens: false });
  const ns = Number(process.hrtime.bigint() - t0) / n;
  console.log(`${name}\t${(ns / 1e6).toFixed(2)} ms/op\t${((bytes / ns) * 1e3).toFixed(2)} MB/s`);
}
