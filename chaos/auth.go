package chaos

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/podbus/podbus/internal/natsauth"
)

// initAuth makes the CA, the NATS servers' certificate (for 127.0.0.1) and a credential per role: the
// services', one per agent's node, and the reader's the checker uses, as `podbus natsauth init` does.
func (h *harness) initAuth(nodes []string) error {
	roles := append([]string{}, natsauth.ServiceRoles...)
	for _, n := range nodes {
		roles = append(roles, natsauth.AgentRole(n))
	}
	in, err := natsauth.Init(filepath.Join(h.cfg.Dir, "natsauth"), []string{"127.0.0.1", "localhost"}, roles)
	if err != nil {
		return err
	}
	h.auth = &in
	return nil
}

// credArgs are the flags of a process holding role's credential.
func (h *harness) credArgs(role string) []string {
	if h.auth == nil {
		return nil
	}
	return []string{"--nats-creds", natsauth.File(h.auth.CredsDir, role), "--nats-ca", h.auth.CA}
}

// clientOptions are the harness's own connection options as role.
func (h *harness) clientOptions(role string) ([]nats.Option, error) {
	if h.auth == nil {
		return nil, nil
	}
	opts, _, err := natsauth.ClientOptions(natsauth.File(h.auth.CredsDir, role), h.auth.CA)
	return opts, err
}

// provision creates the streams and buckets with the admin credential: no service's own may.
func (h *harness) provision(ctx context.Context) error {
	var last []byte
	err := poll(ctx, 90*time.Second, func() bool {
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		args := append([]string{"natsauth", "provision", "--nats", strings.Join(h.natsURLs, ","), "--replicas", "3"},
			h.credArgs(natsauth.RoleAdmin)...)
		out, err := exec.CommandContext(pctx, h.cfg.Bin, args...).CombinedOutput()
		last = out
		return err == nil
	})
	if err != nil {
		return fmt.Errorf("provision the streams: %w\n%s", err, last)
	}
	h.logf("streams and buckets provisioned with the admin credential")
	return nil
}
