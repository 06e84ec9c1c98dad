package framework

import (
	"encoding/json"
	"errors"
	"fmt"

	"sigs.k8s.io/yaml"
)

// ErrArgs is returned (wrapped) by a PluginFactory for args it cannot use.
var ErrArgs = errors.New("invalid plugin args")

// PluginFactory builds a plugin from its args: a profile's pluginConfig entry for it, as JSON (nil
// when the profile has none), as kube-scheduler's in-tree registry does.
type PluginFactory func(args json.RawMessage) (Plugin, error)

// NoArgs is the factory of a plugin that takes no args. Args that kube-scheduler gives the plugin of
// the same name (kind <name>Args) are accepted and ignored, so a kube-scheduler configuration works
// unchanged; args of another kind are an error.
func NoArgs[P Plugin](name string, newPlugin func() P) PluginFactory {
	return func(args json.RawMessage) (Plugin, error) {
		if err := CheckArgsKind(args, name+"Args"); err != nil {
			return nil, fmt.Errorf("plugin %s: %w", name, err)
		}
		return newPlugin(), nil
	}
}

// CheckArgsKind checks that args, if they name a kind, name kind.
func CheckArgsKind(args json.RawMessage, kind string) error {
	if len(args) == 0 {
		return nil
	}
	var tm struct {
		Kind string `json:"kind"`
	}
	if err := json.Unmarshal(args, &tm); err != nil {
		return fmt.Errorf("%w: %v", ErrArgs, err)
	}
	if tm.Kind != "" && tm.Kind != kind {
		return fmt.Errorf("%w: kind %s, want %s", ErrArgs, tm.Kind, kind)
	}
	return nil
}

// DecodeArgs decodes args into v strictly (unknown fields are errors; apiVersion and kind are
// allowed and checked against kind). Empty args leave v as it is.
func DecodeArgs(args json.RawMessage, kind string, v any) error {
	if len(args) == 0 {
		return nil
	}
	if err := CheckArgsKind(args, kind); err != nil {
		return err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(args, &m); err != nil {
		return fmt.Errorf("%w: %v", ErrArgs, err)
	}
	delete(m, "apiVersion")
	delete(m, "kind")
	rest, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrArgs, err)
	}
	if err := yaml.UnmarshalStrict(rest, v); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrArgs, kind, err)
	}
	return nil
}
