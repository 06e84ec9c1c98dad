package convert

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestValidateConfigMap(t *testing.T) {
	cm := func(data map[string]string, bin map[string][]byte) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "default"}, Data: data, BinaryData: bin}
	}
	tests := []struct {
		name string
		cm   *corev1.ConfigMap
		want []string // substrings of the errors, in order; nil: valid
	}{
		{"valid", cm(map[string]string{"a.conf": "x", "KEY_NAME": "y", "key-name": "z"}, map[string][]byte{"bin": {0, 1}}), nil},
		{"empty", cm(nil, nil), nil},
		{"slash", cm(map[string]string{"a/b": "x"}, nil), []string{`data[a/b]`}},
		{"dot", cm(map[string]string{".": "x"}, nil), []string{`data[.]`}},
		{"binary key", cm(nil, map[string][]byte{"a b": nil}), []string{`binaryData[a b]`}},
		{"duplicate", cm(map[string]string{"k": "x"}, map[string][]byte{"k": nil}), []string{"duplicate of key present in binaryData"}},
		{"at the limit", cm(map[string]string{"k": strings.Repeat("x", MaxConfigMapSize)}, nil), nil},
		{"over the limit", cm(map[string]string{"k": strings.Repeat("x", MaxConfigMapSize+1)}, nil), []string{"Too long"}},
		{"no namespace", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c"}}, []string{"metadata.namespace"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := ValidateConfigMap(tt.cm)
			if len(errs) != len(tt.want) {
				t.Fatalf("errors = %v, want %d", errs, len(tt.want))
			}
			for i, w := range tt.want {
				if !strings.Contains(errs[i].Error(), w) {
					t.Errorf("error %d = %q, want %q", i, errs[i], w)
				}
			}
		})
	}
}

func TestValidateConfigMapUpdate(t *testing.T) {
	yes, no := true, false
	old := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "default", ResourceVersion: "1"}, Data: map[string]string{"k": "v"}, Immutable: &yes}
	tests := []struct {
		name   string
		change func(c *corev1.ConfigMap)
		want   int
	}{
		{"labels", func(c *corev1.ConfigMap) { c.Labels = map[string]string{"a": "b"} }, 0},
		{"data", func(c *corev1.ConfigMap) { c.Data["k"] = "w" }, 1},
		{"binaryData", func(c *corev1.ConfigMap) { c.BinaryData = map[string][]byte{"b": nil} }, 1},
		{"unset immutable", func(c *corev1.ConfigMap) { c.Immutable = &no }, 1},
		{"drop immutable", func(c *corev1.ConfigMap) { c.Immutable = nil }, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := old.DeepCopy()
			tt.change(c)
			if errs := ValidateConfigMapUpdate(c, old); len(errs) != tt.want {
				t.Errorf("errors = %v, want %d", errs, tt.want)
			}
		})
	}
	mutable := old.DeepCopy()
	mutable.Immutable = nil
	c := mutable.DeepCopy()
	c.Data["k"] = "w"
	if errs := ValidateConfigMapUpdate(c, mutable); len(errs) != 0 {
		t.Errorf("a mutable ConfigMap's data may change: %v", errs)
	}
}

func TestValidateNamespace(t *testing.T) {
	for name, want := range map[string]int{"team-a": 0, "Team": 1, "a.b": 1, strings.Repeat("a", 64): 1} {
		n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NamespaceSpec{Finalizers: []corev1.FinalizerName{"kubernetes"}}}
		if errs := ValidateNamespace(n); len(errs) != want {
			t.Errorf("%s: errors %v, want %d", name, errs, want)
		}
	}
}
