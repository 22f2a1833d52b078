package httphost

import "testing"

func TestByAddress(t *testing.T) {
	for host, want := range map[string]bool{
		"127.0.0.1:8265": true, "127.0.0.1": true, "[::1]:80": true, "::1": true,
		"localhost:8265": true, "LOCALHOST": true, "10.1.2.3:9": true,
		"evil.example:8265": false, "localhost.evil.example": false, "": false,
	} {
		if got := ByAddress(host); got != want {
			t.Errorf("ByAddress(%q) = %v, want %v", host, got, want)
		}
	}
}
