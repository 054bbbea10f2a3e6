package pki

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"testing"
	"time"

	"k8s.io/client-go/util/keyutil"
)

func parseLeaf(t *testing.T, certPEM, keyPEM []byte) *x509.Certificate {
	t.Helper()
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf
}

func TestIssue(t *testing.T) {
	ca, err := NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca.PEM) {
		t.Fatal("the CA's PEM holds no certificate")
	}
	certPEM, keyPEM, err := ca.Issue(Leaf{CommonName: "kube-apiserver", Hosts: []string{"kubernetes.default.svc", "10.0.0.1"}, Server: true, Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	leaf := parseLeaf(t, certPEM, keyPEM)
	for _, name := range []string{"10.0.0.1", "kubernetes.default.svc"} {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots}); err != nil {
			t.Errorf("serving certificate for %s: %v", name, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "10.0.0.2", Roots: roots}); err == nil {
		t.Error("the certificate is valid for an address it was not issued for")
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "10.0.0.1", Roots: roots, CurrentTime: time.Now().Add(2 * time.Hour)}); err == nil {
		t.Error("the certificate is valid past its validity")
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "10.0.0.1", Roots: roots, CurrentTime: time.Now().Add(-30 * time.Minute)}); err != nil {
		t.Errorf("a clock half an hour behind: %v", err)
	}

	clientPEM, clientKey, err := ca.Issue(Leaf{CommonName: "c", Organizations: []string{"system:masters"}, Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	client := parseLeaf(t, clientPEM, clientKey)
	if _, err := client.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate: %v", err)
	}
	if _, err := client.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("a client certificate serves")
	}
	if len(client.Subject.Organization) != 1 || client.Subject.Organization[0] != "system:masters" {
		t.Errorf("client certificate groups %v", client.Subject.Organization)
	}

	other, err := NewCA("other", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	otherRoots := x509.NewCertPool()
	otherRoots.AppendCertsFromPEM(other.PEM)
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "10.0.0.1", Roots: otherRoots}); err == nil {
		t.Error("another CA verifies the certificate")
	}
	expired, err := NewCA("expired", -time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(expired.PEM)
	if c, err := x509.ParseCertificate(block.Bytes); err != nil || !c.NotAfter.Before(time.Now()) || !c.IsCA {
		t.Errorf("CA made with a negative validity: %v, %+v", err, c)
	}
}

func TestKeyPair(t *testing.T) {
	keyPEM, pubPEM, err := KeyPair()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := keyutil.ParsePrivateKeyPEM(keyPEM); err != nil {
		t.Errorf("private key: %v", err)
	}
	pubs, err := keyutil.ParsePublicKeysPEM(pubPEM)
	if err != nil || len(pubs) != 1 {
		t.Fatalf("public key: %v (%d keys)", err, len(pubs))
	}
	block, _ := pem.Decode(pubPEM)
	if block == nil || block.Type != "PUBLIC KEY" {
		t.Errorf("public key block %v", block)
	}
}
