package natsauth

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// Credential is one role's nkey: the seed stays with the client, the public key goes to the server.
type Credential struct {
	Role   string
	Public string // the user's public nkey (U...)
	Seed   []byte // the user's seed (SU...), secret
}

// ErrCredential is returned for a credential file that cannot be read as one.
var ErrCredential = errors.New("natsauth: bad credential file")

// NewCredential makes a fresh nkey for role.
func NewCredential(role string) (Credential, error) {
	if _, err := Permissions(role); err != nil {
		return Credential{}, err
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		return Credential{}, fmt.Errorf("natsauth: %w", err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	return Credential{Role: role, Public: pub, Seed: seed}, nil
}

const roleLine = "# podbus role: "

// encode is the file format: a comment naming the role, then the decorated seed that
// nats.NkeyOptionFromSeed reads.
func (c Credential) encode() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# podbus NATS credential (nkey seed): keep it secret\n%s%s\n\n", roleLine, c.Role)
	fmt.Fprintf(&b, "-----BEGIN USER NKEY SEED-----\n%s\n------END USER NKEY SEED------\n", c.Seed)
	return b.Bytes()
}

// File is the path of role's credential in dir.
func File(dir, role string) string { return filepath.Join(dir, role+".creds") }

// ReadFile reads a credential file written by WriteFile.
func ReadFile(path string) (Credential, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Credential{}, fmt.Errorf("natsauth: %w", err)
	}
	var role string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if r, ok := strings.CutPrefix(sc.Text(), roleLine); ok {
			role = strings.TrimSpace(r)
		}
	}
	if role == "" {
		return Credential{}, fmt.Errorf("%w %s: no %q line", ErrCredential, path, strings.TrimSpace(roleLine))
	}
	kp, err := nkeys.ParseDecoratedNKey(data)
	if err != nil {
		return Credential{}, fmt.Errorf("%w %s: %v", ErrCredential, path, err)
	}
	pub, err := kp.PublicKey()
	if err != nil || !nkeys.IsValidPublicUserKey(pub) {
		return Credential{}, fmt.Errorf("%w %s: not a user nkey", ErrCredential, path)
	}
	seed, _ := kp.Seed()
	return Credential{Role: role, Public: pub, Seed: seed}, nil
}

// WriteFile writes c to path, readable by its owner only.
func WriteFile(path string, c Credential) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("natsauth: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, c.encode(), 0o600); err != nil {
		return fmt.Errorf("natsauth: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("natsauth: %w", err)
	}
	return nil
}

// LoadOrCreate returns the credentials of roles in dir, creating (mode 0600) those that are missing and
// reusing the others, so that clients handed a file keep working across restarts.
func LoadOrCreate(dir string, roles ...string) ([]Credential, error) {
	out := make([]Credential, 0, len(roles))
	for _, role := range roles {
		path := File(dir, role)
		c, err := ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			if c, err = NewCredential(role); err == nil {
				err = WriteFile(path, c)
			}
		}
		if err != nil {
			return nil, err
		}
		if c.Role != role {
			return nil, fmt.Errorf("%w %s: role %q, want %q", ErrCredential, path, c.Role, role)
		}
		out = append(out, c)
	}
	return out, nil
}

// ClientOptions are the nats.go options of a client holding the credential at path: its nkey, and its
// role's inbox prefix (replies to anything else are not the role's to read). ca, when set, is the CA
// file the server's TLS certificate chains to.
func ClientOptions(path, ca string) ([]nats.Option, string, error) {
	var opts []nats.Option
	role := ""
	if path != "" {
		c, err := ReadFile(path)
		if err != nil {
			return nil, "", err
		}
		nk, err := nats.NkeyOptionFromSeed(path)
		if err != nil {
			return nil, "", fmt.Errorf("%w %s: %v", ErrCredential, path, err)
		}
		role = c.Role
		opts = append(opts, nk, nats.CustomInboxPrefix(InboxPrefix(c.Role)))
	}
	if ca != "" {
		opts = append(opts, nats.RootCAs(ca))
	}
	return opts, role, nil
}

// Users are the server's nkey users of creds, each with its role's permissions.
func Users(creds []Credential) ([]*server.NkeyUser, error) {
	var out []*server.NkeyUser
	for _, c := range creds {
		p, err := Permissions(c.Role)
		if err != nil {
			return nil, err
		}
		out = append(out, &server.NkeyUser{Nkey: c.Public, Permissions: p.Server()})
	}
	return out, nil
}

// Configure makes opts require one of creds on every client connection (in-process ones included).
func Configure(opts *server.Options, creds []Credential) error {
	users, err := Users(creds)
	if err != nil {
		return err
	}
	opts.Nkeys = users
	return nil
}

// ConfigText is the nats-server configuration block of creds (`authorization { users: [...] }`), for
// servers run from a configuration file. nats-server's format accepts JSON values.
func ConfigText(creds []Credential) (string, error) {
	type subj struct {
		Allow []string `json:"allow,omitempty"`
		Deny  []string `json:"deny,omitempty"`
	}
	type perms struct {
		Publish   subj            `json:"publish"`
		Subscribe subj            `json:"subscribe"`
		Responses *map[string]int `json:"allow_responses,omitempty"`
	}
	type user struct {
		Comment     string `json:"-"`
		Nkey        string `json:"nkey"`
		Permissions perms  `json:"permissions"`
	}
	var b strings.Builder
	b.WriteString("authorization {\n  users: [\n")
	sorted := slices.Clone(creds)
	slices.SortFunc(sorted, func(a, b Credential) int { return strings.Compare(a.Role, b.Role) })
	for _, c := range sorted {
		p, err := Permissions(c.Role)
		if err != nil {
			return "", err
		}
		u := user{Nkey: c.Public, Permissions: perms{Publish: subj{p.PubAllow, p.PubDeny}, Subscribe: subj{p.SubAllow, p.SubDeny}}}
		if p.Responses {
			u.Permissions.Responses = &map[string]int{"max": 1}
		}
		var data bytes.Buffer
		enc := json.NewEncoder(&data)
		enc.SetEscapeHTML(false) // nats-server's parser knows no \u escapes; ">" must stay as it is
		if err := enc.Encode(u); err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "    # %s\n    %s", c.Role, data.Bytes())
	}
	b.WriteString("  ]\n}\n")
	return b.String(), nil
}
