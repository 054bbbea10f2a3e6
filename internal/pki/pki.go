// Package pki is a certificate authority held in memory and the
// certificates it signs: the webhook's serving certificate when no one
// mounts one (internal/webhookcert), and the local control plane's serving
// and client certificates (test/cluster). client-go's cert helpers make
// only self-signed pairs of fixed lifetimes, so the certificates are made
// here with crypto/x509; client-go encodes the keys. Keys are ECDSA P-256
// and live only as long as the caller keeps them.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"

	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// skew backdates every certificate, for clocks a little behind ours.
const skew = time.Hour

// CA signs leaf certificates.
type CA struct {
	cert *x509.Certificate
	key  crypto.Signer
	// PEM is the CA certificate, for whoever verifies the leaves (a
	// webhook's caBundle, a kubeconfig, a kubelet).
	PEM []byte
}

// NewCA makes a self-signed CA named name, valid for validity from now.
// (client-go's cert.NewSelfSignedCACert fixes ten years; the webhook's
// caBundle drops a CA once it expired, so a CA here lives as long as the
// certificates it signs.)
func NewCA(name string, validity time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate the key of CA %s: %w", name, err)
	}
	serial, err := serialNumber(name)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-skew),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("create CA %s: %w", name, err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse CA %s: %w", name, err)
	}
	return &CA{cert: c, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: cert.CertificateBlockType, Bytes: der})}, nil
}

// serialNumber is a random serial number for the certificate of name.
func serialNumber(name string) (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, fmt.Errorf("serial number of certificate %s: %w", name, err)
	}
	return n, nil
}

// Leaf is what a leaf certificate says.
type Leaf struct {
	CommonName    string
	Organizations []string
	// Hosts are the IP addresses and DNS names a serving certificate is
	// for.
	Hosts []string
	// Server: a serving certificate; otherwise a client certificate.
	Server bool
	// Validity counts from now (the caller's choice; a negative one
	// makes an expired certificate, for tests).
	Validity time.Duration
}

// Issue signs leaf and returns the certificate and its new key, PEM
// encoded.
func (ca *CA) Issue(leaf Leaf) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate the key of certificate %s: %w", leaf.CommonName, err)
	}
	serial, err := serialNumber(leaf.CommonName)
	if err != nil {
		return nil, nil, err
	}
	usage := x509.ExtKeyUsageClientAuth
	if leaf.Server {
		usage = x509.ExtKeyUsageServerAuth
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: leaf.CommonName, Organization: leaf.Organizations},
		NotBefore:    now.Add(-skew),
		NotAfter:     now.Add(leaf.Validity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	for _, h := range leaf.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("create certificate %s: %w", leaf.CommonName, err)
	}
	keyPEM, err = keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encode the key of certificate %s: %w", leaf.CommonName, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: cert.CertificateBlockType, Bytes: der}), keyPEM, nil
}

// KeyPair makes a signing key and its public key, PEM encoded (the API
// server's service-account token flags take the two files).
func KeyPair() (keyPEM, pubPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate a signing key: %w", err)
	}
	if keyPEM, err = keyutil.MarshalPrivateKeyToPEM(key); err != nil {
		return nil, nil, fmt.Errorf("encode the signing key: %w", err)
	}
	der, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return nil, nil, fmt.Errorf("encode the public key: %w", err)
	}
	return keyPEM, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}
