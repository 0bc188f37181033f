package audit

import (
	"bytes"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"strings"
	"testing"
	"time"
)

// The signed text of version 1 is exactly the documented five lines.
func TestCheckpointMessage(t *testing.T) {
	t.Parallel()
	hash := bytes.Repeat([]byte{0xab}, 32)
	at := time.Date(2026, 12, 1, 15, 31, 47, 774575321, time.FixedZone("CET", 3600))
	got := string(CheckpointMessage("0190c0de-0000-7000-8000-000000000001", 1042, hash, at))
	want := "taskflow-audit-checkpoint/v1\n0190c0de-0000-7000-8000-000000000001\n1042\n" +
		strings.Repeat("ab", 32) + "\n2026-12-01T14:31:47.774575Z\n"
	if got != want {
		t.Fatalf("message %q, want %q", got, want)
	}
}

// A checkpoint verifies with its key only, and not after any field changed.
func TestCheckpointSignVerify(t *testing.T) {
	t.Parallel()
	key := GenerateSigningKey()
	pub := key.Public().(ed25519.PublicKey)
	cp := SignCheckpoint(key, "user:x", 7, bytes.Repeat([]byte{1}, 32), time.Now())
	if err := cp.Verify(pub); err != nil {
		t.Fatal(err)
	}
	if len(cp.KeyID) != 16 || cp.KeyID != KeyID(pub) || cp.Version != CheckpointVersion {
		t.Fatalf("checkpoint %+v", cp)
	}
	other := GenerateSigningKey().Public().(ed25519.PublicKey)
	if err := cp.Verify(other); err == nil {
		t.Error("verified with another key")
	}
	for name, edit := range map[string]func(*Checkpoint){
		"chain":     func(c *Checkpoint) { c.ChainKey = "user:y" },
		"position":  func(c *Checkpoint) { c.Position++ },
		"hash":      func(c *Checkpoint) { c.HeadHash = strings.Repeat("02", 32) },
		"time":      func(c *Checkpoint) { c.SignedAt = c.SignedAt.Add(time.Microsecond) },
		"signature": func(c *Checkpoint) { c.Signature = base64.StdEncoding.EncodeToString(make([]byte, 64)) },
		"key id":    func(c *Checkpoint) { c.KeyID = KeyID(other) },
		"version":   func(c *Checkpoint) { c.Version = "taskflow-audit-checkpoint/v2" },
		"bad hash":  func(c *Checkpoint) { c.HeadHash = "zz" },
		"bad sig":   func(c *Checkpoint) { c.Signature = "%%%" },
		"position0": func(c *Checkpoint) { c.Position = 0 },
		"newline":   func(c *Checkpoint) { c.ChainKey = "a\nb" },
	} {
		c := cp
		edit(&c)
		if err := c.Verify(pub); err == nil {
			t.Errorf("%s: still verifies", name)
		}
	}
	// Sub-microsecond time and another zone are the same checkpoint.
	c := cp
	c.SignedAt = c.SignedAt.In(time.FixedZone("X", -7200)).Add(300 * time.Nanosecond)
	if err := c.Verify(pub); err != nil {
		t.Errorf("same instant to the microsecond: %v", err)
	}
	c.Version = ""
	if err := c.Verify(pub); err != nil {
		t.Errorf("no version means v1: %v", err)
	}
}

// Keys are read in every documented form, and bad ones fail without
// repeating the input.
func TestParseKeys(t *testing.T) {
	t.Parallel()
	key := GenerateSigningKey()
	pub := key.Public().(ed25519.PublicKey)
	der, _ := x509.MarshalPKCS8PrivateKey(key)
	pubDER, _ := x509.MarshalPKIXPublicKey(pub)
	for _, s := range []string{
		EncodeSigningKey(key),
		base64.RawURLEncoding.EncodeToString(key.Seed()),
		base64.StdEncoding.EncodeToString(der),
		string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		" " + EncodeSigningKey(key) + "\n",
	} {
		got, err := ParseSigningKey(s)
		if err != nil || !got.Equal(key) {
			t.Errorf("ParseSigningKey(%.30q): %v", s, err)
		}
	}
	for _, s := range []string{
		EncodePublicKey(pub),
		base64.StdEncoding.EncodeToString(pubDER),
		string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})),
	} {
		got, err := ParsePublicKey(s)
		if err != nil || !got.Equal(pub) {
			t.Errorf("ParsePublicKey(%.30q): %v", s, err)
		}
	}
	secret := "c2VjcmV0LXNlY3JldA=="
	for _, s := range []string{"", "not base64!", secret, string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}))} {
		if _, err := ParseSigningKey(s); err == nil || strings.Contains(err.Error(), secret) {
			t.Errorf("ParseSigningKey(%.30q): %v", s, err)
		}
	}
	if _, err := ParsePublicKey(EncodeSigningKey(key) + "AAAA"); err == nil {
		t.Error("a 35-byte public key was accepted")
	}
}
