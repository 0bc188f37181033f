package audit

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// CheckpointVersion names the canonical text a checkpoint's signature covers
// (CheckpointMessage). A change of that text gets a new version.
const CheckpointVersion = "taskflow-audit-checkpoint/v1"

// checkpointTime is how a checkpoint's time is written in its message: UTC,
// microseconds (what Postgres keeps).
const checkpointTime = "2006-01-02T15:04:05.000000Z"

// Checkpoint is a signed statement that a hash chain had, at SignedAt, the
// head HeadHash at Position. A customer who keeps one can later prove that
// the log still extends it: that no event up to Position was changed or
// removed since. Its JSON form is what the API returns and what
// examples/auditverify reads.
type Checkpoint struct {
	Version  string    `json:"version"`
	ChainKey string    `json:"chainKey"`
	Position int64     `json:"position"`
	HeadHash string    `json:"headHash"` // hex SHA-256
	SignedAt time.Time `json:"signedAt"`
	// KeyID names the Ed25519 key that signed (see KeyID).
	KeyID string `json:"keyId"`
	// Signature is the standard base64 of the Ed25519 signature of Message().
	Signature string `json:"signature"`
}

// CheckpointMessage returns the canonical text a checkpoint's signature
// covers, version 1: five lines, each ended by a newline:
//
//	taskflow-audit-checkpoint/v1
//	<chain key>
//	<position, decimal>
//	<head hash, lower-case hex>
//	<signed at, UTC, 2006-01-02T15:04:05.000000Z>
func CheckpointMessage(chainKey string, position int64, headHash []byte, signedAt time.Time) []byte {
	var b bytes.Buffer
	b.WriteString(CheckpointVersion + "\n")
	b.WriteString(chainKey + "\n")
	b.WriteString(strconv.FormatInt(position, 10) + "\n")
	b.WriteString(hex.EncodeToString(headHash) + "\n")
	b.WriteString(signedAt.UTC().Truncate(time.Microsecond).Format(checkpointTime) + "\n")
	return b.Bytes()
}

// Message returns the text c's signature covers, or an error if c is not a
// well-formed checkpoint of version 1.
func (c Checkpoint) Message() ([]byte, error) {
	if c.Version != "" && c.Version != CheckpointVersion {
		return nil, fmt.Errorf("checkpoint version %q is not %q", c.Version, CheckpointVersion)
	}
	if c.ChainKey == "" || strings.ContainsAny(c.ChainKey, "\n\r") {
		return nil, errors.New("checkpoint chain key is empty or not one line")
	}
	if c.Position < 1 {
		return nil, errors.New("checkpoint position must be 1 or more")
	}
	hash, err := hex.DecodeString(c.HeadHash)
	if err != nil || len(hash) != sha256.Size {
		return nil, errors.New("checkpoint head hash is not 64 hex digits")
	}
	if c.SignedAt.IsZero() {
		return nil, errors.New("checkpoint time is missing")
	}
	return CheckpointMessage(c.ChainKey, c.Position, hash, c.SignedAt), nil
}

// Verify checks c's signature with the public key pub: it returns nil when c
// is well formed, names pub (KeyID) and its signature over Message() is
// valid.
func (c Checkpoint) Verify(pub ed25519.PublicKey) error {
	msg, err := c.Message()
	if err != nil {
		return err
	}
	if len(pub) != ed25519.PublicKeySize {
		return errors.New("not an Ed25519 public key")
	}
	if c.KeyID != KeyID(pub) {
		return fmt.Errorf("checkpoint was signed by key %q, not by %q", c.KeyID, KeyID(pub))
	}
	sig, err := base64.StdEncoding.DecodeString(c.Signature)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return errors.New("checkpoint signature is not the base64 of an Ed25519 signature")
	}
	if !ed25519.Verify(pub, msg, sig) {
		return errors.New("checkpoint signature does not verify")
	}
	return nil
}

// SignCheckpoint returns the checkpoint of the chain's head at position,
// signed at signedAt (kept to the microsecond) with key.
func SignCheckpoint(key ed25519.PrivateKey, chainKey string, position int64, headHash []byte, signedAt time.Time) Checkpoint {
	signedAt = signedAt.UTC().Truncate(time.Microsecond)
	pub := key.Public().(ed25519.PublicKey)
	sig := ed25519.Sign(key, CheckpointMessage(chainKey, position, headHash, signedAt))
	return Checkpoint{Version: CheckpointVersion, ChainKey: chainKey, Position: position,
		HeadHash: hex.EncodeToString(headHash), SignedAt: signedAt, KeyID: KeyID(pub),
		Signature: base64.StdEncoding.EncodeToString(sig)}
}

// KeyID returns the name of an Ed25519 public key: the first 16 hex digits of
// the SHA-256 of its 32 bytes.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// GenerateSigningKey returns a new random Ed25519 key.
func GenerateSigningKey() ed25519.PrivateKey {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return key
}

// EncodeSigningKey returns the form of key that ParseSigningKey reads back
// and AUDIT_SIGNING_KEY takes: the standard base64 of its 32-byte seed.
func EncodeSigningKey(key ed25519.PrivateKey) string {
	return base64.StdEncoding.EncodeToString(key.Seed())
}

// EncodePublicKey returns the standard base64 of pub's 32 bytes, the form
// the API lists and ParsePublicKey reads.
func EncodePublicKey(pub ed25519.PublicKey) string {
	return base64.StdEncoding.EncodeToString(pub)
}

// ParseSigningKey reads an Ed25519 private key given as the base64 (standard
// or URL alphabet, padded or not) of its 32-byte seed or of its PKCS#8 DER
// form, or as a PKCS#8 PEM block (openssl genpkey -algorithm ed25519). The
// error never repeats the key.
func ParseSigningKey(s string) (ed25519.PrivateKey, error) {
	der, err := keyBytes(s, "PRIVATE KEY")
	if err != nil {
		return nil, err
	}
	if len(der) == ed25519.SeedSize {
		return ed25519.NewKeyFromSeed(der), nil
	}
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, errors.New("not the base64 of a 32-byte Ed25519 seed or of a PKCS#8 key")
	}
	key, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, errors.New("a PKCS#8 key, but not an Ed25519 one")
	}
	return key, nil
}

// ParsePublicKey reads an Ed25519 public key given as the base64 of its 32
// bytes or of its PKIX DER form, or as a PEM "PUBLIC KEY" block (openssl
// pkey -pubout).
func ParsePublicKey(s string) (ed25519.PublicKey, error) {
	der, err := keyBytes(s, "PUBLIC KEY")
	if err != nil {
		return nil, err
	}
	if len(der) == ed25519.PublicKeySize {
		return ed25519.PublicKey(der), nil
	}
	k, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, errors.New("not the base64 of a 32-byte Ed25519 public key or of a PKIX key")
	}
	pub, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, errors.New("a PKIX key, but not an Ed25519 one")
	}
	return pub, nil
}

// keyBytes returns the DER (or raw) bytes of a key given as a PEM block of
// type pemType or as base64 in any of its four variants.
func keyBytes(s, pemType string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "-----BEGIN") {
		block, _ := pem.Decode([]byte(s))
		if block == nil || block.Type != pemType {
			return nil, fmt.Errorf("not a PEM %q block", pemType)
		}
		return block.Bytes, nil
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, nil
		}
	}
	return nil, errors.New("not base64")
}
