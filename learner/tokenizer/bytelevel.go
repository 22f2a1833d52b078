package tokenizer

// The GPT-2 byte-level alphabet: every byte maps to one printable rune so
// that BPE tokens are plain strings. Printable Latin-1 bytes map to
// themselves; the other 68 bytes map, in byte order, to U+0100, U+0101, ...
// (so the space byte 0x20 becomes 'Ġ' U+0120 and '\n' becomes 'Ċ' U+010A).
var (
	byteToRune [256]rune
	runeToByte = make(map[rune]byte, 256)
)

func init() {
	next := rune(256)
	for b := 0; b < 256; b++ {
		printable := (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
		if printable {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = next
			next++
		}
		runeToByte[byteToRune[b]] = byte(b)
	}
}

// byteLevelEncode maps raw bytes to their byte-level token spelling.
func byteLevelEncode(s string) string {
	out := make([]rune, len(s))
	for i := 0; i < len(s); i++ {
		out[i] = byteToRune[s[i]]
	}
	return string(out)
}

// byteLevelDecode maps a token spelled in the byte-level alphabet back to raw
// bytes. ok is false when some rune is outside the alphabet; Hugging Face's
// ByteLevel decoder then passes the token's own UTF-8 bytes through, which
// callers do too.
func byteLevelDecode(tok string) (raw []byte, ok bool) {
	raw = make([]byte, 0, len(tok))
	for _, r := range tok {
		b, in := runeToByte[r]
		if !in {
			return nil, false
		}
		raw = append(raw, b)
	}
	return raw, true
}
