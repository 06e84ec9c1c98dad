package main

import (
	"context"

	"github.com/podbus/podbus/agent"
	"github.com/podbus/podbus/agent/cri"
)

// keepSandboxes is the containerd runtime of a deliberately broken agent (--test-keep-sandboxes): it
// never removes a sandbox, so a deleted pod's containers stay behind. podbus chaos runs it to show
// that its checker names them (check.KindLeftover).
type keepSandboxes struct{ *cri.Runtime }

func (keepSandboxes) RemoveSandbox(context.Context, agent.Sandbox) error { return nil }
