package agent

import "context"

// ConnectivityChecker is implemented by a runtime that can check the part of a sandbox's network the
// pod's connectivity rests on (its interface, its address) more cheaply than CheckSandbox checks all
// of it. The first check of a pod, the one its Ready condition waits for, uses it; the periodic
// checks run CheckSandbox, so the rest (host ports, firewall rules) is verified within an interval.
type ConnectivityChecker interface {
	CheckSandboxConnectivity(ctx context.Context, sb Sandbox) error
}

// sandboxCheck is the check to run: the connectivity check when quick is asked and the runtime has
// one, else the full CheckSandbox.
func (a *Agent) sandboxCheck(quick bool) func(context.Context, Sandbox) error {
	if cc, ok := a.rt.(ConnectivityChecker); ok && quick {
		return cc.CheckSandboxConnectivity
	}
	return a.rt.CheckSandbox
}
