// Package tokenizer owns text ↔ token-id conversion for the policy models:
// Hugging Face tokenizer.json files of the byte-level BPE kind (Qwen2, Qwen2.5,
// Llama-3), a BPE trainer and a small built-in tokenizer for the tiny models
// trained from scratch here, and the Qwen2.5 chat template.
//
// It is pure code: no network, no model weights, no actors. Encoding matches
// Hugging Face tokenizers' encode(text, add_special_tokens=False): added tokens
// (<|im_start|>, <|im_end|>, ...) are matched in the text first, the rest is
// normalized, split by the model's pre-tokenizer pattern and merged by BPE.
// Go's regexp has no lookahead, so the Qwen2/Llama-3/GPT-2 split patterns are
// recognised by their exact text and run as hand-written scanners
// (pretokenize.go); any other pattern is refused with ErrUnsupported rather
// than approximated. The standard library has no Unicode normalization, so
// Qwen2's NFC normalizer is implemented here from Unicode 15.0 tables
// (normalize.go, gen_nfc.go) and checked against Unicode's conformance test.
//
// Tests compare with Hugging Face's own JavaScript tokenizers and Jinja
// renderer and with a backtracking regex engine; the scripts that write those
// golden files are in testdata/ (no Hugging Face Python package is in
// Debian).
package tokenizer
