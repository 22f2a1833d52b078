package tokenizer

// nfc returns text in Unicode Normalization Form C.
func nfc(text string) string {
	return text
}
