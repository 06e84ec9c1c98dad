package secretbox

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestRoundTripAndRefusals(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "enc", "key")
	b, err := LoadOrCreate(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v, want 0600", fi.Mode().Perm())
	}
	again, err := LoadOrCreate(path) // the second start reads the same key
	if err != nil {
		t.Fatal(err)
	}
	plain := []byte(`{"data":{"password":"aHVudGVyMg=="}}`)
	sealed, err := b.Seal("default.db", plain)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(sealed, []byte(Prefix+"key1:")) || bytes.Contains(sealed, []byte("aHVudGVyMg")) {
		t.Fatalf("sealed value %q", sealed)
	}
	got, err := again.Open("default.db", sealed)
	if err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("Open = %q, %v", got, err)
	}

	other, err := LoadOrCreate(filepath.Join(dir, "other"))
	if err != nil {
		t.Fatal(err)
	}
	tampered := bytes.Clone(sealed)
	tampered[len(tampered)-1] ^= 1
	for name, tc := range map[string]struct {
		box  *Box
		aad  string
		data []byte
	}{
		"wrong key":          {other, "default.db", sealed},
		"no key":             {nil, "default.db", sealed},
		"moved to other key": {b, "default.other", sealed},
		"altered":            {b, "default.db", tampered},
	} {
		if _, err := tc.box.Open(tc.aad, tc.data); !errors.Is(err, ErrDecrypt) {
			t.Errorf("%s: Open err = %v, want ErrDecrypt", name, err)
		}
	}
	// Values stored before encryption are read as they are.
	if got, err := b.Open("k", plain); err != nil || !bytes.Equal(got, plain) {
		t.Errorf("Open(clear) = %q, %v", got, err)
	}
}

func TestRotation(t *testing.T) {
	k1, k2 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	old, err := New([]string{"key1"}, [][]byte{k1})
	if err != nil {
		t.Fatal(err)
	}
	sealed, _ := old.Seal("a", []byte("x"))
	rotated, err := New([]string{"key2", "key1"}, [][]byte{k2, k1})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := rotated.Open("a", sealed); err != nil || string(got) != "x" {
		t.Fatalf("Open with the old key second = %q, %v", got, err)
	}
	resealed, _ := rotated.Seal("a", []byte("x"))
	if !bytes.HasPrefix(resealed, []byte(Prefix+"key2:")) {
		t.Errorf("sealed with %q, want key2", resealed[:len(Prefix)+5])
	}
}

func TestBadKeyFile(t *testing.T) {
	for name, content := range map[string]string{
		"empty":      "",
		"no name":    "c2VjcmV0\n",
		"short":      "key1:c2VjcmV0\n",
		"not base64": "key1:!!!\n",
	} {
		p := filepath.Join(t.TempDir(), "k")
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(p); !errors.Is(err, ErrKeyFile) {
			t.Errorf("%s: Load err = %v, want ErrKeyFile", name, err)
		}
	}
}
