package httpauth

import (
	"net/http"
	"testing"
)

func TestLoopback(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost": true, "LocalHost": true, "127.0.0.1": true, "127.3.2.1": true,
		"::1": true, "[::1]": true,
		"": false, "0.0.0.0": false, "::": false, "10.0.0.1": false, "example.com": false,
		"localhost.example.com": false, "127.0.0.1.nip.io": false,
	} {
		if got := Loopback(host); got != want {
			t.Errorf("Loopback(%q) = %v, want %v", host, got, want)
		}
	}
}

func TestLoopbackHostport(t *testing.T) {
	for hp, want := range map[string]bool{
		"localhost:8080": true, "127.0.0.1:1": true, "[::1]:443": true, "[::1]": true, "localhost": true,
		"127.0.0.1": true, ":8080": false, "": false, "example.com:80": false, "10.1.1.1:5": false,
	} {
		if got := LoopbackHostport(hp); got != want {
			t.Errorf("LoopbackHostport(%q) = %v, want %v", hp, got, want)
		}
	}
}

func TestLoopbackAddr(t *testing.T) {
	for addr, want := range map[string]bool{
		"localhost:0": true, "127.0.0.1:8080": true, "[::1]:9": true,
		":8080": false, "0.0.0.0:80": false, "example.com:80": false,
	} {
		got, err := LoopbackAddr(addr)
		if err != nil || got != want {
			t.Errorf("LoopbackAddr(%q) = %v, %v; want %v", addr, got, err, want)
		}
	}
	if _, err := LoopbackAddr("localhost"); err == nil {
		t.Error(`LoopbackAddr("localhost") = nil error, want one (no port)`)
	}
}

func TestSecrets(t *testing.T) {
	ds := []Digest{DigestOf("first-secret"), DigestOf("second-secret")}
	for secret, want := range map[string]int{"first-secret": 0, "second-secret": 1, "": -1, "first-secre": -1, "first-secrets": -1} {
		if got := Match(ds, secret); got != want {
			t.Errorf("Match(%q) = %d, want %d", secret, got, want)
		}
	}
	if Match(nil, "x") != -1 {
		t.Error("Match(nil) found a secret")
	}
	if !Equal("abcdefgh", "abcdefgh") || Equal("abcdefgh", "abcdefg") || Equal("abcdefgh", "abcdefgi") || Equal("", "a") {
		t.Error("Equal compares wrongly")
	}
}

func TestBearer(t *testing.T) {
	for v, want := range map[string]string{
		"Bearer tok": "tok", "bearer  tok ": "tok", "BEARER tok": "tok",
		"Bearer ": "", "Basic dXNlcjpwYXNz": "", "tok": "", "": "",
	} {
		h := http.Header{}
		if v != "" {
			h.Set("Authorization", v)
		}
		got, ok := Bearer(h)
		if got != want || ok != (want != "") {
			t.Errorf("Bearer(%q) = %q, %v; want %q", v, got, ok, want)
		}
	}
}
