package cluster

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestControlGuard(t *testing.T) {
	const token = "s3cret"
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusAccepted) })
	cases := []struct {
		name    string
		method  string
		host    string
		origin  string
		auth    string
		namesOK bool
		want    int
	}{
		{"status by address", "GET", "127.0.0.1:9000", "", "", false, http.StatusAccepted},
		{"status as localhost", "GET", "localhost:9000", "", "", false, http.StatusAccepted},
		{"status over IPv6", "GET", "[::1]:9000", "", "", false, http.StatusAccepted},
		{"status from its own page", "GET", "127.0.0.1:9000", "http://127.0.0.1:9000", "", false, http.StatusAccepted},
		{"status from a foreign page", "GET", "127.0.0.1:9000", "http://evil.example", "", false, http.StatusForbidden},
		{"rebound name", "GET", "evil.example:9000", "", "", false, http.StatusForbidden},
		{"rebound name, same origin", "GET", "evil.example:9000", "http://evil.example:9000", "", false, http.StatusForbidden},
		{"host name beyond loopback", "GET", "gpu-3:9000", "", "", true, http.StatusAccepted},
		{"stop with the token", "POST", "127.0.0.1:9000", "", "Bearer " + token, false, http.StatusAccepted},
		{"stop without a token", "POST", "127.0.0.1:9000", "", "", false, http.StatusUnauthorized},
		{"stop with a wrong token", "POST", "127.0.0.1:9000", "", "Bearer guess", false, http.StatusUnauthorized},
		{"stop with the token in another scheme", "POST", "127.0.0.1:9000", "", "Basic " + token, false, http.StatusUnauthorized},
		{"stop from a foreign page with the token", "POST", "127.0.0.1:9000", "http://evil.example", "Bearer " + token, false, http.StatusForbidden},
		{"stop from a null origin", "POST", "127.0.0.1:9000", "null", "Bearer " + token, false, http.StatusForbidden},
		{"stop beyond loopback without a token", "POST", "gpu-3:9000", "", "", true, http.StatusUnauthorized},
		{"delete without a token", "DELETE", "127.0.0.1:9000", "", "", false, http.StatusUnauthorized},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(c.method, "http://"+c.host+"/stop", nil)
			r.Host = c.host
			if c.origin != "" {
				r.Header.Set("Origin", c.origin)
			}
			if c.auth != "" {
				r.Header.Set("Authorization", c.auth)
			}
			w := httptest.NewRecorder()
			controlGuard(token, c.namesOK, ok).ServeHTTP(w, r)
			if w.Code != c.want {
				t.Fatalf("%s %s (Host %s, Origin %q, Authorization %q): HTTP %d, want %d: %s", c.method, "/stop", c.host, c.origin, c.auth, w.Code, c.want, w.Body)
			}
		})
	}
}
