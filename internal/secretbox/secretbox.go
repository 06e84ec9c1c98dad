// Package secretbox encrypts API objects at rest, as kube-apiserver's EncryptionConfiguration with the
// aesgcm provider does: a stored value is "k8s:enc:aesgcm:v1:<key name>:" followed by a random 12-byte
// nonce and the AES-GCM ciphertext, sealed with the value's storage key as additional data so that a
// value copied under another key does not open.
//
// The key file holds one key a line, "<name>:<base64 of 32 bytes>": the first seals, every one opens
// (rotation: put a new key first, rewrite the objects, then drop the old one). Values without the
// prefix are read as they are, as kube's identity provider reads what was stored before encryption.
package secretbox

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Prefix starts every sealed value; the key's name and a colon follow.
const Prefix = "k8s:enc:aesgcm:v1:"

const keySize = 32 // AES-256

var (
	// ErrDecrypt: the value is sealed with a key this box does not hold, or was altered.
	ErrDecrypt = errors.New("secretbox: cannot decrypt")
	// ErrKeyFile: the key file is malformed or unsafe.
	ErrKeyFile = errors.New("secretbox: bad key file")
)

type key struct {
	name string
	aead cipher.AEAD
}

// Box seals and opens values. The zero of *Box (nil) is the identity: it stores values in clear.
type Box struct {
	keys []key // keys[0] seals
}

// New makes a box from named 32-byte keys, the first sealing.
func New(names []string, secrets [][]byte) (*Box, error) {
	if len(names) == 0 || len(names) != len(secrets) {
		return nil, fmt.Errorf("%w: no keys", ErrKeyFile)
	}
	b := &Box{}
	for i, n := range names {
		if n == "" || strings.ContainsAny(n, ": \t") {
			return nil, fmt.Errorf("%w: key name %q", ErrKeyFile, n)
		}
		if len(secrets[i]) != keySize {
			return nil, fmt.Errorf("%w: key %s is %d bytes, want %d", ErrKeyFile, n, len(secrets[i]), keySize)
		}
		blk, err := aes.NewCipher(secrets[i])
		if err != nil {
			return nil, err
		}
		aead, err := cipher.NewGCM(blk)
		if err != nil {
			return nil, err
		}
		b.keys = append(b.keys, key{name: n, aead: aead})
	}
	return b, nil
}

// Load reads a key file.
func Load(path string) (*Box, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var names []string
	var secrets [][]byte
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		n, v, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("%w %s: want name:base64", ErrKeyFile, path)
		}
		s, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			return nil, fmt.Errorf("%w %s: key %s: %v", ErrKeyFile, path, n, err)
		}
		names, secrets = append(names, n), append(secrets, s)
	}
	b, err := New(names, secrets)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}

// LoadOrCreate reads the key file at path, first creating it (mode 0600, one random key named key1)
// when it does not exist.
func LoadOrCreate(path string) (*Box, error) {
	s := make([]byte, keySize)
	if _, err := rand.Read(s); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	switch {
	case errors.Is(err, fs.ErrExist):
		return Load(path)
	case err != nil:
		return nil, err
	}
	_, err = fmt.Fprintf(f, "key1:%s\n", base64.StdEncoding.EncodeToString(s))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return nil, err
	}
	return Load(path)
}

// Seal encrypts plain with the first key; aad is the value's storage key. A nil box returns plain.
func (b *Box) Seal(aad string, plain []byte) ([]byte, error) {
	if b == nil {
		return plain, nil
	}
	k := b.keys[0]
	nonce := make([]byte, k.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(Prefix)+len(k.name)+1+len(nonce)+len(plain)+k.aead.Overhead())
	out = append(append(append(out, Prefix...), k.name...), ':')
	out = append(out, nonce...)
	return k.aead.Seal(out, nonce, plain, []byte(aad)), nil
}

// Open decrypts a sealed value stored under aad; a value without the prefix is returned as it is.
// ErrDecrypt when the key is not held (a nil box holds none) or the value was altered.
func (b *Box) Open(aad string, data []byte) ([]byte, error) {
	rest, ok := bytes.CutPrefix(data, []byte(Prefix))
	if !ok {
		return data, nil
	}
	name, ct, ok := bytes.Cut(rest, []byte(":"))
	if !ok {
		return nil, fmt.Errorf("%w: malformed value", ErrDecrypt)
	}
	if b != nil {
		for _, k := range b.keys {
			if k.name != string(name) {
				continue
			}
			n := k.aead.NonceSize()
			if len(ct) < n {
				return nil, fmt.Errorf("%w: short value", ErrDecrypt)
			}
			plain, err := k.aead.Open(nil, ct[:n], ct[n:], []byte(aad))
			if err != nil {
				return nil, fmt.Errorf("%w: key %s: %v", ErrDecrypt, name, err)
			}
			return plain, nil
		}
	}
	return nil, fmt.Errorf("%w: no key named %q", ErrDecrypt, name)
}

// Sealed reports whether data is a sealed value.
func Sealed(data []byte) bool { return bytes.HasPrefix(data, []byte(Prefix)) }
