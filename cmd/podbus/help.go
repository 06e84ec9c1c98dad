package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/podbus/podbus/internal/cli"
)

// examples are shown by `podbus <command> -h`, one command line each.
var examples = map[string][]string{
	"up":            {"podbus up", "podbus up --nodes 50 --schedulers 3 --runtime fake", "PODBUS_NODES=10 podbus up --health-addr 127.0.0.1:8081"},
	"down":          {"podbus down", "sudo podbus down --data .podbus --force"},
	"nats":          {"podbus nats --store /var/lib/podbus/nats", "podbus nats --name n1 --cluster-name podbus --routes nats://n2:6222,nats://n3:6222"},
	"admission":     {"podbus admission --nats nats://n1:4222 --listen :6443 --kubeconfig-out admin.kubeconfig", "PODBUS_NATS_CREDS=creds/admission.creds podbus admission"},
	"store":         {"podbus store --nats nats://n1:4222 --health-addr :8081"},
	"scheduler":     {"podbus scheduler --nats nats://n1:4222 --id sched-1", "podbus scheduler --profile examples/profiles.yaml"},
	"binder":        {"podbus binder --nats nats://n1:4222"},
	"status":        {"podbus status --nats nats://n1:4222 --node-monitor-grace-period 20s"},
	"namespaces":    {"podbus namespaces --nats nats://n1:4222"},
	"agent":         {"podbus agent --node worker-1 --nats nats://n1:4222", "podbus agent --node sim --nodes 100 --runtime fake", "sudo podbus agent --runtime containerd --pod-cidr auto"},
	"images":        {"podbus images build --out .podbus/images"},
	"registry":      {"podbus registry --addr 127.0.0.1:5000"},
	"health":        {"podbus health --url http://127.0.0.1:8081/readyz", "PODBUS_URL=http://store:8081/readyz podbus health"},
	"loadtest":      {"podbus loadtest --pods 1000 --nodes 50", "podbus loadtest --api https://127.0.0.1:6443 --kubeconfig .podbus/kubeconfig --rate 200", "PODBUS_PODS=200 podbus loadtest --quiet", "podbus loadtest --scenario deployments --deployments 100 --replicas 100 --nodes 500"},
	"natsauth":      {"podbus natsauth init --dir .podbus/natsauth --hosts n1,n2,n3", "podbus natsauth provision --nats nats://n1:4222 --nats-creds .podbus/natsauth/creds/admin.creds"},
	"audit":         {"podbus audit replay --since 15m", "podbus audit timeline default/web-1", "podbus audit verify --chain"},
	"auditseal":     {"podbus auditseal --nats nats://n1:4222 --data-dir /var/lib/podbus/seal"},
	"cluster":       {"podbus cluster", "podbus cluster --nats nats://127.0.0.1:4222 --nats-creds .podbus/nats-creds/reader.creds --nats-ca .podbus/pki/ca.crt"},
	"nodelifecycle": {"podbus nodelifecycle --nats nats://n1:4222 --node-eviction-rate 10"},
	"controllers":   {"podbus controllers --nats nats://n1:4222 --id controllers-1"},
	"workloads":     {"podbus workloads --nats nats://n1:4222", "podbus workloads --id wl-b --workers 8"},
	"chaos":         {"podbus chaos --duration 10m --seed 42", "make chaos CHAOS_DURATION=30m", "podbus chaos --containerd-address /run/containerd/containerd.sock"},
	"version":       {"podbus version"},
	"completion":    {"source <(podbus completion bash)", "podbus completion zsh > \"${fpath[1]}/_podbus\""},
}

// verbs are the commands whose first argument picks what they do; their flags depend on it.
var verbs = map[string][]string{
	"audit":    {"replay", "timeline", "verify", "check", "what-if"},
	"natsauth": {"init", "provision"},
	"images":   {"build"},
}

// operands follow the flags in a command's usage line.
var operands = map[string]string{"completion": " bash|zsh"}

// commandHelp prints a command's usage line, summary, examples and global flags. Its own flags follow
// from its flag set (cli.Parse), except for a command with verbs asked before one: it reports true then,
// as nothing more is to be printed.
func commandHelp(w io.Writer, c command, args []string) (done bool) {
	vs := verbs[c.name]
	if len(vs) > 0 && cli.Help(args[:1]) {
		fmt.Fprintf(w, "usage: podbus %s <%s> [flags]\n\n%s\n", c.name, strings.Join(vs, "|"), c.summary)
		done = true
	} else {
		fmt.Fprintf(w, "usage: podbus %s [flags]%s\n\n%s\n", c.name, operands[c.name], c.summary)
	}
	if ex := examples[c.name]; len(ex) > 0 {
		fmt.Fprintf(w, "\nexamples:\n")
		for _, e := range ex {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
	fmt.Fprintf(w, "\nglobal flags:\n")
	cli.PrintFlag(w, &flag.Flag{Name: "log-format", Usage: "log `format` on standard error: text or json; PODBUS_LOG sets the level (debug, info, warn, error)"})
	if done {
		fmt.Fprintf(w, "\n`podbus %s <verb> -h` lists a verb's flags.\n", c.name)
	} else {
		fmt.Fprintln(w)
	}
	return done
}

// completion lists the commands, so it joins them once they are defined.
func init() {
	commands = append(commands, command{"completion", "print a shell completion script: completion bash|zsh", runCompletion})
}

// errShell is returned by completion for a shell it has no script for.
var errShell = errors.New("want bash or zsh")

func runCompletion(_ context.Context, args []string) error {
	fs := flag.NewFlagSet("completion", flag.ExitOnError)
	if err := parse(fs, args); err != nil {
		return err
	}
	return completion(os.Stdout, fs.Arg(0))
}

// completion writes shell's completion script. Commands and verbs are listed in it; a command's flags
// are read from its help when completing, so the script stays right when flags change.
func completion(w io.Writer, shell string) error {
	var names []string
	for _, c := range commands {
		names = append(names, c.name)
	}
	var verbCases strings.Builder
	for _, c := range commands {
		if vs := verbs[c.name]; len(vs) > 0 {
			fmt.Fprintf(&verbCases, "    %s) verbs=%q ;;\n", c.name, strings.Join(vs, " "))
		}
	}
	switch shell {
	case "bash":
		fmt.Fprintf(w, bashCompletion, strings.Join(names, " "), verbCases.String())
	case "zsh":
		var described strings.Builder
		for _, c := range commands {
			fmt.Fprintf(&described, "    %q\n", c.name+":"+strings.ReplaceAll(c.summary, ":", `\:`))
		}
		fmt.Fprintf(w, zshCompletion, described.String(), verbCases.String())
	default:
		return fmt.Errorf("%w, not %q", errShell, shell)
	}
	return nil
}

const bashCompletion = `# podbus bash completion: source <(podbus completion bash)
_podbus() {
  local cur=${COMP_WORDS[COMP_CWORD]} cmd=${COMP_WORDS[1]} verb= verbs=
  if [[ $COMP_CWORD -eq 1 ]]; then
    COMPREPLY=($(compgen -W "%s help" -- "$cur"))
    return
  fi
  case $cmd in
%s  esac
  if [[ -n $verbs ]]; then
    if [[ $COMP_CWORD -eq 2 ]]; then
      COMPREPLY=($(compgen -W "$verbs" -- "$cur"))
      return
    fi
    verb=${COMP_WORDS[2]}
  fi
  if [[ $cur == -* ]]; then
    local flags
    flags=$("${COMP_WORDS[0]}" $cmd $verb --help 2>/dev/null | sed -n 's/^  \(--*[a-zA-Z0-9-]*\).*/\1/p')
    COMPREPLY=($(compgen -W "$flags" -- "$cur"))
    return
  fi
  COMPREPLY=($(compgen -f -- "$cur"))
}
complete -F _podbus podbus
`

const zshCompletion = `#compdef podbus
# podbus zsh completion: podbus completion zsh > "${fpath[1]}/_podbus"
_podbus() {
  local -a cmds flags
  local verbs=
  cmds=(
%s  )
  if (( CURRENT == 2 )); then
    _describe 'command' cmds
    return
  fi
  case $words[2] in
%s  esac
  if [[ -n $verbs && CURRENT -eq 3 ]]; then
    compadd -- ${=verbs}
    return
  fi
  if [[ $words[CURRENT] == -* ]]; then
    flags=(${(f)"$($words[1] $words[2] ${verbs:+$words[3]} --help 2>/dev/null | sed -n 's/^  \(--*[a-zA-Z0-9-]*\).*/\1/p')"})
    compadd -- $flags
    return
  fi
  _files
}
compdef _podbus podbus
`
