package chaos

import (
	"encoding/json"
	"net/http"
	"testing"
)

func TestSpreadAffinity(t *testing.T) {
	var spec struct {
		Affinity struct {
			PodAntiAffinity struct {
				Preferred []struct {
					Weight int
					Term   struct {
						TopologyKey   string
						LabelSelector struct{ MatchLabels map[string]string }
					} `json:"podAffinityTerm"`
				} `json:"preferredDuringSchedulingIgnoredDuringExecution"`
			}
		}
	}
	if err := json.Unmarshal([]byte(`{"containers":[]`+spreadAffinity("deploy", `w"1`)+`}`), &spec); err != nil {
		t.Fatal(err)
	}
	p := spec.Affinity.PodAntiAffinity.Preferred
	if len(p) != 1 || p[0].Weight != 100 || p[0].Term.TopologyKey != "kubernetes.io/hostname" || p[0].Term.LabelSelector.MatchLabels["deploy"] != `w"1` {
		t.Errorf("spreadAffinity decodes to %+v", spec)
	}
}

func TestCreatedUID(t *testing.T) {
	tests := []struct {
		code int
		resp string
		want string
	}{
		{http.StatusCreated, `{"metadata":{"name":"a","uid":"u-1"}}`, "u-1"},
		{http.StatusConflict, `{"metadata":{"uid":"u-1"}}`, ""},
		{http.StatusCreated, `not json`, ""},
	}
	for _, tc := range tests {
		if got := createdUID(tc.code, []byte(tc.resp)); got != tc.want {
			t.Errorf("createdUID(%d, %s) = %q, want %q", tc.code, tc.resp, got, tc.want)
		}
	}
}
