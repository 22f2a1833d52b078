package tokenizer

import (
	"bufio"
	"compress/bzip2"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// runConformance checks NFC against NormalizationTest.txt lines
// "c1;c2;c3;c4;c5": NFC(c1) = NFC(c2) = NFC(c3) = c2 and
// NFC(c4) = NFC(c5) = c4.
func runConformance(t *testing.T, name string, r io.Reader) int {
	t.Helper()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	lines, failures := 0, 0
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "@") {
			continue
		}
		cols := strings.Split(line, ";")
		if len(cols) < 5 {
			t.Fatalf("%s:%d: %d columns", name, n, len(cols))
		}
		var c [5]string
		for i := range c {
			for _, h := range strings.Fields(cols[i]) {
				v, err := strconv.ParseUint(h, 16, 32)
				if err != nil {
					t.Fatalf("%s:%d: %v", name, n, err)
				}
				c[i] += string(rune(v))
			}
		}
		lines++
		for i, want := range []int{1, 1, 1, 3, 3} {
			if got := nfc(c[i]); got != c[want] {
				failures++
				if failures <= 10 {
					t.Errorf("%s:%d: NFC(c%d %+q) = %+q, want c%d %+q", name, n, i+1, c[i], got, want+1, c[want])
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if failures > 10 {
		t.Errorf("%s: %d failures in all", name, failures)
	}
	return lines
}

func TestNFCConformance(t *testing.T) {
	f, err := os.Open(filepath.Join("testdata", "nfc_conformance.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if n := runConformance(t, "nfc_conformance.txt", f); n < 3000 {
		t.Errorf("only %d test lines read", n)
	}
}

// TestNFCConformanceFull runs the whole Unicode test file where Debian's
// unicode-data package has installed it.
func TestNFCConformanceFull(t *testing.T) {
	const path = "/usr/share/unicode/NormalizationTest.txt.bz2"
	f, err := os.Open(path)
	if err != nil {
		t.Skipf("%v (apt-get install unicode-data to run it)", err)
	}
	defer f.Close()
	if n := runConformance(t, path, bzip2.NewReader(f)); n < 19000 {
		t.Errorf("only %d test lines read", n)
	}
}

func TestNFCKeepsInvalidUTF8(t *testing.T) {
	for _, in := range []string{"e\u0301\xff", "\xc3", "A\u030a\xe2\x82B\u0301"} {
		got := nfc(in)
		want := strings.NewReplacer("e\u0301", "é", "A\u030a", "Å", "B\u0301", "B\u0301").Replace(in)
		if got != want {
			t.Errorf("nfc(%+q) = %+q, want %+q", in, got, want)
		}
	}
}
