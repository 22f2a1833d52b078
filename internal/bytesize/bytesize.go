// Package bytesize reads and writes amounts of memory ("64GiB", "500MB"):
// a leaf, importing nothing of the module, so that recipes may use it.
package bytesize

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Parse reads an amount of memory: plain bytes ("1073741824"), or a
// number with a unit: KiB MiB GiB TiB (powers of 1024), KB MB GB TB
// (powers of 1000), or K M G T alone (powers of 1024, as Slurm's --mem
// and docker's --memory read them); "B" and lower case are accepted.
// Fractions round down to whole bytes.
func Parse(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.TrimSpace(t[i:])
	if num == "" {
		return 0, fmt.Errorf("size %q: want a number of bytes, or a number with a unit such as 64GiB, 500MB, 1.5G", s)
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: want a number of bytes, or a number with a unit such as 64GiB, 500MB, 1.5G", s)
	}
	mult, ok := sizeUnits[strings.ToLower(unit)]
	if !ok {
		return 0, fmt.Errorf("size %q: unknown unit %q: want B, K, M, G, T, KB, MB, GB, TB, KiB, MiB, GiB or TiB", s, unit)
	}
	b := v * mult
	if b >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return int64(b), nil
}

var sizeUnits = map[string]float64{
	"": 1, "b": 1,
	"k": 1 << 10, "kib": 1 << 10, "kb": 1e3,
	"m": 1 << 20, "mib": 1 << 20, "mb": 1e6,
	"g": 1 << 30, "gib": 1 << 30, "gb": 1e9,
	"t": 1 << 40, "tib": 1 << 40, "tb": 1e12,
}

// Format writes an amount of memory in binary units, as "23.4 GiB".
func Format(v float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	i := 0
	for math.Abs(v) >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i == 0 {
		return strconv.FormatFloat(v, 'f', -1, 64) + " B"
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " " + units[i]
}
