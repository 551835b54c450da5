package serve_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/client"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/serve"
)

// selfSigned returns a certificate for 127.0.0.1 and a pool trusting it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "freqcap test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// Over TLS, gRPC (HTTP/2 by ALPN) and JSON both reach the server.
func TestTLS(t *testing.T) {
	cert, pool := selfSigned(t)
	b, _ := backendKinds[0].new(t)
	callers, err := serve.ParseCallers("sender:sender-secret-1:take@push")
	if err != nil {
		t.Fatal(err)
	}
	e := start(t, b, serve.Config{Callers: callers, TLS: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}})
	url := strings.Replace(e.url, "http://", "https://", 1)
	for _, pr := range protocols {
		c := client.New(url, &client.Options{Protocol: pr.p, Token: "sender-secret-1", TLSConfig: &tls.Config{RootCAs: pool}})
		d, err := c.Take(context.Background(), e.policies["push"], sdk.Attempt{Subject: sdk.Subject{"user": "tls", "content": pr.name}})
		if err != nil || !d.Allowed {
			t.Errorf("%s over TLS: Take = %+v, %v", pr.name, d, err)
		}
	}
	// Plain HTTP to the TLS port gets no answer.
	c := client.New(e.url, &client.Options{Protocol: client.ConnectJSON, Token: "sender-secret-1", Timeout: 5 * time.Second})
	if _, err := c.Take(context.Background(), e.policies["push"], sdk.Attempt{Subject: sdk.Subject{"user": "tls", "content": "plain"}}); err == nil {
		t.Error("Take over plain HTTP to the TLS port succeeded")
	}
}
