package natsauth

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/podbus/podbus/internal/pki"
)

// ServerFiles is the name of the NATS servers' share of an Init directory (CopyTo).
const ServerFiles = "nats"

// Initialized is what Init made or found.
type Initialized struct {
	CA        string // the CA certificate every client trusts
	Cert, Key string // the NATS servers' certificate (server and client use: routes) and key
	Conf      string // the servers' authorization block (ConfigText)
	CredsDir  string // one credential per role (File)
	Roles     []string
}

// Init makes, on first run, and reuses after: a CA in dir/pki, a certificate for the NATS servers named
// hosts, a credential per role in dir/creds, and dir/nats-auth.conf with every credential's public key and
// permissions. Credentials already there are kept, so clients given one keep working; nats-auth.conf is
// rewritten each time (it holds no secret).
func Init(dir string, hosts, roles []string) (Initialized, error) {
	ca, err := pki.LoadOrCreate(filepath.Join(dir, "pki"))
	if err != nil {
		return Initialized{}, err
	}
	cert, key, err := ca.Peer(ServerFiles, hosts...)
	if err != nil {
		return Initialized{}, err
	}
	out := Initialized{CA: ca.CertFile(), Cert: cert, Key: key, Conf: filepath.Join(dir, "nats-auth.conf"),
		CredsDir: filepath.Join(dir, "creds"), Roles: roles}
	creds, err := LoadOrCreate(out.CredsDir, roles...)
	if err != nil {
		return Initialized{}, err
	}
	text, err := ConfigText(creds)
	if err != nil {
		return Initialized{}, err
	}
	if err := os.WriteFile(out.Conf, []byte(text), 0o644); err != nil {
		return Initialized{}, fmt.Errorf("natsauth: %w", err)
	}
	return out, nil
}

// CopyTo copies into dst/<role> each role's credential and the CA, and into dst/nats (ServerFiles) the
// servers' certificate, key, CA and authorization, for those of these directories that exist (in
// docker-compose, one volume per service mounted there). It returns the directories it filled.
func (in Initialized) CopyTo(dst string) ([]string, error) {
	var filled []string
	put := func(name string, files ...string) error {
		d := filepath.Join(dst, name)
		if st, err := os.Stat(d); errors.Is(err, fs.ErrNotExist) || (err == nil && !st.IsDir()) {
			return nil
		} else if err != nil {
			return fmt.Errorf("natsauth: %w", err)
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				return fmt.Errorf("natsauth: %w", err)
			}
			if err := os.WriteFile(filepath.Join(d, filepath.Base(f)), data, 0o600); err != nil {
				return fmt.Errorf("natsauth: %w", err)
			}
		}
		filled = append(filled, name)
		return nil
	}
	for _, r := range in.Roles {
		if err := put(r, File(in.CredsDir, r), in.CA); err != nil {
			return nil, err
		}
	}
	if err := put(ServerFiles, in.Cert, in.Key, in.CA, in.Conf); err != nil {
		return nil, err
	}
	return filled, nil
}
