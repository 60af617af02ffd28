package kubeenv_test

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
)

func parseCert(b []byte) (*x509.Certificate, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, errors.New("no PEM block")
	}
	return x509.ParseCertificate(blk.Bytes)
}
