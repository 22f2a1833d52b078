package cluster

import (
	"reflect"
	"testing"
)

func TestParseNvidiaSMI(t *testing.T) {
	out := "0, NVIDIA H100 80GB HBM3, 81559\n1, NVIDIA H200, 143771\n"
	got, err := parseNvidiaSMI(out)
	want := []GPUInfo{{0, "NVIDIA H100 80GB HBM3", 81559}, {1, "NVIDIA H200", 143771}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, %v", got, err)
	}
	if g, err := parseNvidiaSMI(""); err != nil || len(g) != 0 {
		t.Fatalf("empty output: %+v, %v", g, err)
	}
	for _, bad := range []string{"0, H100", "x, H100, 10", "0, H100, lots"} {
		if _, err := parseNvidiaSMI(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
