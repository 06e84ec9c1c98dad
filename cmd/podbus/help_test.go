package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/podbus/podbus/loadtest"
)

// podbusRun runs main in a child process of the test binary with args, returning its output and exit code.
func podbusRun(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestMainChild$")
	cmd.Env = append(os.Environ(), "PODBUS_MAIN_TEST_ARGS="+strings.Join(args, "\x1f"))
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

// TestMainChild is main itself when podbusRun starts the test binary.
func TestMainChild(t *testing.T) {
	args, ok := os.LookupEnv("PODBUS_MAIN_TEST_ARGS")
	if !ok {
		t.Skip("run by podbusRun")
	}
	os.Args = append([]string{"podbus"}, strings.Split(args, "\x1f")...)
	main()
}

// Every command's help (and every verb's) exits 0 with a usage line, examples, and each flag with its
// PODBUS_ variable.
func TestCommandHelp(t *testing.T) {
	var runs [][]string
	for _, c := range commands {
		runs = append(runs, []string{c.name, "--help"})
		for _, v := range verbs[c.name] {
			runs = append(runs, []string{c.name, v, "-h"})
		}
	}
	for _, args := range runs {
		t.Run(strings.Join(args[:len(args)-1], "_"), func(t *testing.T) {
			out, code := podbusRun(t, args...)
			if code != 0 {
				t.Fatalf("podbus %s: exit %d\n%s", strings.Join(args, " "), code, out)
			}
			for _, want := range []string{"usage: podbus " + args[0], "examples:\n  ", "$PODBUS_LOG_FORMAT"} {
				if !strings.Contains(out, want) {
					t.Errorf("help lacks %q:\n%s", want, out)
				}
			}
			for _, l := range strings.Split(out, "\n") {
				if strings.HasPrefix(l, "  -") {
					if !strings.Contains(l, "$PODBUS_") {
						t.Errorf("flag without its variable: %q", l)
					}
				}
			}
		})
	}
}

// The environment sets the flags of health and loadtest, which once parsed their own.
func TestEnvAppliesToEveryCommand(t *testing.T) {
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	defer ok.Close()
	t.Setenv("PODBUS_URL", ok.URL)
	if err := runHealth(context.Background(), nil); err != nil {
		t.Errorf("health with PODBUS_URL=%s: %v", ok.URL, err)
	}
	t.Setenv("PODBUS_PODS", "7")
	t.Setenv("PODBUS_RATE", "2.5")
	cfg, err := loadtest.ParseFlags([]string{"--nodes", "3"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Pods != 7 || cfg.Rate != 2.5 || cfg.Nodes != 3 {
		t.Errorf("loadtest: pods %d rate %v nodes %d, want 7 2.5 3", cfg.Pods, cfg.Rate, cfg.Nodes)
	}
}

func TestVersion(t *testing.T) {
	out, code := podbusRun(t, "version")
	for _, want := range []string{"podbus ", "module github.com/podbus/podbus", "go     go1."} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("podbus version: exit %d, %q; want %q", code, out, want)
		}
	}
}

func TestCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh"} {
		var out bytes.Buffer
		if err := completion(&out, shell); err != nil {
			t.Fatalf("%s: %v", shell, err)
		}
		for _, c := range commands {
			if !strings.Contains(out.String(), c.name) {
				t.Errorf("%s completion lacks %s", shell, c.name)
			}
		}
		for _, v := range []string{"replay", "provision", "--help"} {
			if !strings.Contains(out.String(), v) {
				t.Errorf("%s completion lacks %s", shell, v)
			}
		}
	}
	if err := completion(&bytes.Buffer{}, "fish"); !errors.Is(err, errShell) {
		t.Errorf("fish: %v, want errShell", err)
	}
}
