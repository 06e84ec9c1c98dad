package natsauth

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/podbus/podbus/bus"
)

func allRoles() []string {
	return append(append([]string{}, ServiceRoles...), RoleSimAgents, AgentRole("node-1"), AgentRole("n.example"), PoolRole("up"))
}

// Credentials are owner-only files, made once and reused as they are.
func TestLoadOrCreateReuses(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "creds")
	first, err := LoadOrCreate(dir, allRoles()...)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range first {
		st, err := os.Stat(File(dir, c.Role))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", c.Role, st.Mode().Perm())
		}
	}
	before, _ := os.ReadFile(File(dir, RoleStore))
	again, err := LoadOrCreate(dir, allRoles()...)
	if err != nil {
		t.Fatal(err)
	}
	for i := range first {
		if first[i].Public != again[i].Public || string(first[i].Seed) != string(again[i].Seed) {
			t.Errorf("%s: credential replaced", first[i].Role)
		}
	}
	if after, _ := os.ReadFile(File(dir, RoleStore)); string(after) != string(before) {
		t.Error("store credential rewritten")
	}
	// A file under another role's name is refused, not silently used.
	if err := os.Rename(File(dir, RoleReader), File(dir, RoleBinder)); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreate(dir, RoleBinder); !errors.Is(err, ErrCredential) {
		t.Errorf("binder file holding the reader's credential: %v, want ErrCredential", err)
	}
}

func TestPermissionsRefuseUnknownRoles(t *testing.T) {
	for _, role := range []string{"", "root", "agent-", "agent-a.b", "agent-any", "agent-g3", "agent-create", "agents-", "agents-*"} {
		if _, err := Permissions(role); !errors.Is(err, ErrRole) {
			t.Errorf("Permissions(%q): %v, want ErrRole", role, err)
		}
	}
	for _, role := range allRoles() {
		p, err := Permissions(role)
		if err != nil {
			t.Fatalf("%s: %v", role, err)
		}
		if role == RoleAdmin {
			continue
		}
		// Every service credential is denied stream management, whatever it is allowed.
		for _, s := range []string{"$JS.API.STREAM.DELETE.>", "$JS.API.STREAM.UPDATE.>", "$JS.API.STREAM.MSG.DELETE.>"} {
			if !slices.Contains(p.PubDeny, s) {
				t.Errorf("%s: %s not denied", role, s)
			}
		}
	}
}

// The configuration text says what Users says: nats-server reads back every user with its permissions.
func TestConfigTextRoundTrip(t *testing.T) {
	creds, err := LoadOrCreate(t.TempDir(), allRoles()...)
	if err != nil {
		t.Fatal(err)
	}
	text, err := ConfigText(creds)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "auth.conf")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatal(err)
	}
	users, err := Users(creds)
	if err != nil {
		t.Fatal(err)
	}
	if len(opts.Nkeys) != len(users) {
		t.Fatalf("%d users read back, want %d", len(opts.Nkeys), len(users))
	}
	byKey := map[string]*server.NkeyUser{}
	for _, u := range opts.Nkeys {
		byKey[u.Nkey] = u
	}
	for _, want := range users {
		got := byKey[want.Nkey]
		if got == nil {
			t.Errorf("user %s missing", want.Nkey)
			continue
		}
		g, w := got.Permissions, want.Permissions
		if !slices.Equal(g.Publish.Allow, w.Publish.Allow) || !slices.Equal(g.Publish.Deny, w.Publish.Deny) ||
			!slices.Equal(g.Subscribe.Allow, w.Subscribe.Allow) || (g.Response == nil) != (w.Response == nil) {
			t.Errorf("user %s: permissions differ:\n got %+v\nwant %+v", want.Nkey, g, w)
		}
	}
}

// A server secured by Init's files takes a credential over TLS, and refuses a client without one.
func TestInitSecuresAServer(t *testing.T) {
	dir := t.TempDir()
	in, err := Init(dir, []string{"nats-test"}, allRoles())
	if err != nil {
		t.Fatal(err)
	}
	sec := ServerSecurity{Auth: in.Conf, Cert: in.Cert, Key: in.Key, CA: in.CA}
	srv, err := bus.RunServer(bus.ServerConfig{Port: -1, StoreDir: t.TempDir(), Configure: sec.Configure})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	opts, role, err := ClientOptions(File(in.CredsDir, RoleStore), in.CA)
	if err != nil || role != RoleStore {
		t.Fatalf("client options: %v, role %q", err, role)
	}
	c, err := bus.Connect(ctx, srv.ClientURL(), "store", opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.NC.Close()
	if !c.NC.TLSRequired() {
		t.Error("connection without TLS")
	}
	if _, err := nats.Connect(srv.ClientURL(), nats.RootCAs(in.CA), nats.NoReconnect()); err == nil {
		t.Error("a client without a credential was let in")
	}
	// Reused: a second Init keeps the credential the client holds.
	if _, err := Init(dir, []string{"nats-test"}, allRoles()); err != nil {
		t.Fatal(err)
	}
	if again, _ := ReadFile(File(in.CredsDir, RoleStore)); again.Public != mustRead(t, File(in.CredsDir, RoleStore)).Public {
		t.Error("credential replaced")
	}
	out := t.TempDir()
	for _, d := range []string{RoleStore, ServerFiles} {
		if err := os.Mkdir(filepath.Join(out, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	filled, err := in.CopyTo(out)
	if err != nil || !slices.Equal(filled, []string{RoleStore, ServerFiles}) {
		t.Fatalf("CopyTo: %v, filled %v", err, filled)
	}
	if _, err := ReadFile(filepath.Join(out, RoleStore, RoleStore+".creds")); err != nil {
		t.Error(err)
	}
}

func mustRead(t *testing.T, path string) Credential {
	t.Helper()
	c, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
