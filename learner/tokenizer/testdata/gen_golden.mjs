// Writes the reference files the Go tests compare against, from Hugging
// Face's own JavaScript tokenizers (Tokenizers.js reads tokenizer.json as the
// Rust library does) and its Jinja renderer (for Qwen2.5's chat template).
// No Python package of Hugging Face tokenizers exists in Debian, so this is
// the reference these machines can install.
//
//   npm install --prefix /tmp/tokref @huggingface/tokenizers@0.2.0 @huggingface/jinja@0.5.11
//   cd learner/tokenizer && node testdata/gen_golden.mjs [/tmp/tokref/node_modules]
//
// Inputs: testdata/*.tokenizer.json (written by `go test -run
// TestWriteFixtures -update`), texts.json, chats.json and
// qwen2.5_chat_template.jinja. Outputs: encode.golden.json, decode.golden.json,
// chat.golden.json.
import fs from "fs";
import path from "path";

const modules = process.argv[2] ?? "/tmp/tokref/node_modules";
const { Tokenizer } = await import(path.join(modules, "@huggingface/tokenizers/dist/tokenizers.mjs"));
const { Template } = await import(path.join(modules, "@huggingface/jinja/dist/index.js"));

const dir = "testdata";
const read = (name) => JSON.parse(fs.readFileSync(path.join(dir, name), "utf8"));
const write = (name, value) => fs.writeFileSync(path.join(dir, name), JSON.stringify(value, null, 1) + "\n");

const texts = read("texts.json");
const fixtures = ["qwen2", "qwen2-nfc", "llama3", "gpt2", "builtin"];
const config = { clean_up_tokenization_spaces: false };

const encode = {};
for (const name of fixtures) {
  const tok = new Tokenizer(read(`${name}.tokenizer.json`), config);
  encode[name] = texts.map((text) => {
    const ids = tok.encode(text, { add_special_tokens: false }).ids;
    const decoded = ids.length ? tok.decode(ids, { skip_special_tokens: false }) : "";
    return { text, ids, decoded };
  });
}
write("encode.golden.json", encode);

// Decoding byte tokens that do not form whole characters: the qwen2 fixture's
// ids 0..255 are the byte tokens of bytes 0..255.
const qwen = new Tokenizer(read("qwen2.tokenizer.json"), config);
const byteCases = [
  [0xf0, 0x9f, 0x9a],             // a 4-byte emoji cut after 3 bytes
  [0x41, 0xf0, 0x9f, 0x41],       // cut in the middle of text
  [0xe2, 0x82],                   // 3-byte sequence cut after 2
  [0xc3],                         // lone lead byte
  [0x80, 0x80, 0x41],             // stray continuation bytes
  [0xed, 0xa0, 0x80],             // an encoded surrogate (ill-formed)
  [0xe0, 0x80, 0x80],             // overlong
  [0xf4, 0x90, 0x80, 0x80],       // above U+10FFFF
  [0xff, 0xfe, 0x41],             // bytes never valid in UTF-8
  [0xf0, 0x9f, 0x9a, 0x80],       // the whole emoji
];
const decode = byteCases.map((ids) => ({ ids, text: qwen.decode(ids, { skip_special_tokens: false }) }));
write("decode.golden.json", decode);

const template = new Template(fs.readFileSync(path.join(dir, "qwen2.5_chat_template.jinja"), "utf8"));
const chats = read("chats.json").map((c) => {
  let text = null;
  let error = null;
  try {
    text = template.render({ messages: c.messages, add_generation_prompt: c.add_generation_prompt });
  } catch (e) {
    error = String(e);
  }
  return { ...c, text, error };
});
write("chat.golden.json", chats);
console.log(`wrote ${fixtures.length}×${texts.length} encodings, ${decode.length} decodings, ${chats.length} chats`);
