package chaos

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// spreadAffinity is a pod spec's preferred anti-affinity, by host, against the pods labelled key=value,
// as JSON to follow the spec's containers. Preferred: it never makes a pod unschedulable.
func spreadAffinity(key, value string) string {
	return fmt.Sprintf(`,"affinity":{"podAntiAffinity":{"preferredDuringSchedulingIgnoredDuringExecution":[{"weight":100,`+
		`"podAffinityTerm":{"topologyKey":"kubernetes.io/hostname","labelSelector":{"matchLabels":{%q:%q}}}}]}}`, key, value)
}

// createdUID is the uid of the object a create answered 201 with; "" for any other answer.
func createdUID(code int, resp []byte) string {
	if code != http.StatusCreated {
		return ""
	}
	var o struct {
		Metadata struct{ UID string } `json:"metadata"`
	}
	_ = json.Unmarshal(resp, &o)
	return o.Metadata.UID
}
