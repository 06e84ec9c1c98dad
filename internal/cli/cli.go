// Package cli is the flag handling every podbus command shares, over the standard flag package: each
// flag may also be set as PODBUS_<FLAG> (the command line wins), and a command's help names those
// variables. It lives apart from cmd/podbus so that packages which define their own flag sets (the load
// test) parse the same way.
package cli

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// EnvPrefix starts the environment variable of every flag.
const EnvPrefix = "PODBUS_"

// EnvName is the environment variable of a flag: --nats-creds is PODBUS_NATS_CREDS.
func EnvName(flagName string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Help reports whether args ask for help (-h, -help or --help) before a "--".
func Help(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

// Parse parses args into fs, then sets every flag not given on the command line from its environment
// variable. Asked for help, it prints the flags to standard output: with flag.ExitOnError the process
// then exits 0, otherwise Parse returns flag.ErrHelp.
func Parse(fs *flag.FlagSet, args []string) error {
	fs.Usage = func() { PrintFlags(fs.Output(), fs) }
	if Help(args) {
		fs.SetOutput(os.Stdout)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	return ApplyEnv(fs, os.LookupEnv)
}

// ApplyEnv sets every flag of fs that the command line did not set from lookup(EnvName(flag)).
func ApplyEnv(fs *flag.FlagSet, lookup func(string) (string, bool)) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || err != nil {
			return
		}
		env := EnvName(f.Name)
		if v, ok := lookup(env); ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s: %w", env, e)
			}
		}
	})
	return err
}

// PrintFlags lists fs's flags, each with its type, environment variable, usage and default.
func PrintFlags(w io.Writer, fs *flag.FlagSet) {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n == 0 {
		fmt.Fprintf(w, "flags: none\n")
		return
	}
	fmt.Fprintf(w, "flags (each also read from its environment variable; the command line wins):\n")
	fs.VisitAll(func(f *flag.Flag) { PrintFlag(w, f) })
}

// PrintFlag prints one flag as PrintFlags does.
func PrintFlag(w io.Writer, f *flag.Flag) {
	typ, usage := flag.UnquoteUsage(f)
	dash := "--"
	if len(f.Name) == 1 {
		dash = "-"
	}
	head := dash + f.Name
	if typ != "" {
		head += " " + typ
	}
	fmt.Fprintf(w, "  %-32s $%s\n      %s", head, EnvName(f.Name), strings.ReplaceAll(usage, "\n", "\n      "))
	if def := f.DefValue; def != "" && def != "false" && def != "0" && def != "0s" {
		if typ == "string" {
			def = fmt.Sprintf("%q", def)
		}
		fmt.Fprintf(w, " (default %s)", def)
	}
	fmt.Fprintln(w)
}
