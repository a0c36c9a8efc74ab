// Package credential is how a crawler's probe tells the crawler's own traffic from
// anyone else's (docs/probes.md, "What a probe trusts").
//
// The manager holds a master key that no namespace can read. From it, each crawler gets
// its key, Key(master, crawler UID), which reaches only the crawler's guest (in its
// cloud-init user data) and its probe pod (an environment variable), both through a
// Secret in the crawler's namespace. Each probe's gateway announces a fresh nonce with
// its window; the agent in the guest presents Token(key, nonce) in the Header of every
// request, and the gateway counts a request only when it carries that token. A token is
// good for one probe window: one seen on the wire says nothing of the next window's, and
// the key never leaves the guest or the probe pod.
package credential

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"strings"
)

// Header is the HTTP header the agent presents the token in.
const Header = "Isochron-Probe-Token"

// KeyBytes is the length of the master key and of each crawler's key.
const KeyBytes = 32

// Domain separators: each use of a key MACs a different message, so that no value made
// for one use is good for another.
const (
	crawlerKeyDomain = "isochron probe key v1\x00"
	tokenDomain      = "isochron probe window v1\x00"
	namesDomain      = "isochron probe job names v1\x00"
)

// NewKey returns KeyBytes random bytes: a new master key.
func NewKey() ([]byte, error) {
	k := make([]byte, KeyBytes)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("reading random bytes for a key: %w", err)
	}
	return k, nil
}

// Key is the probe key of the crawler whose UID is crawlerUID.
func Key(master []byte, crawlerUID string) []byte {
	return mac(master, crawlerKeyDomain+crawlerUID)
}

// NameKey is the key that names a crawler's probe Jobs (slo.JobName): derived from the
// master key and different from every crawler's key, so that no namespace can compute
// the name of a probe Job before isochron creates it.
func NameKey(master []byte) []byte { return mac(master, namesDomain) }

// Token is what the agent presents, in Header, during the window of nonce.
func Token(key []byte, nonce string) string { return hex.EncodeToString(mac(key, tokenDomain+nonce)) }

// NewNonce returns a fresh nonce for a probe window.
func NewNonce() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("reading random bytes for a nonce: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// Equal compares a presented token with the expected one in constant time.
func Equal(want, got string) bool {
	return subtle.ConstantTimeCompare([]byte(want), []byte(got)) == 1
}

// Encode is a key as it is written (Secret data, the guest's key file, an environment
// variable): lower-case hex.
func Encode(key []byte) string { return hex.EncodeToString(key) }

// Parse reads a key written by Encode (surrounding white space ignored); what names it
// (a flag, a variable) goes into the error.
func Parse(what, s string) ([]byte, error) {
	k, err := hex.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("%s is not a hex-encoded key: %w", what, err)
	}
	if len(k) != KeyBytes {
		return nil, fmt.Errorf("%s holds a key of %d bytes, want %d", what, len(k), KeyBytes)
	}
	return k, nil
}

func mac(key []byte, msg string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(msg))
	return h.Sum(nil)
}
