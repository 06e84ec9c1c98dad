package admission

import (
	"net/http"
	"runtime"
	"strings"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
)

// The Kubernetes version podbus claims: kubectl picks its matching binary from the minor.
const (
	gitVersion   = "v1.32.0-podbus"
	versionMajor = "1"
	versionMinor = "32"
)

func handleVersion(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, version.Info{
		Major:      versionMajor,
		Minor:      versionMinor,
		GitVersion: gitVersion,
		GoVersion:  runtime.Version(),
		Compiler:   runtime.Compiler,
		Platform:   runtime.GOOS + "/" + runtime.GOARCH,
	})
}

// resourceInfo describes one served resource for both discovery forms.
type resourceInfo struct {
	name, singular, kind string
	namespaced           bool
	verbs                []string
	short                []string
	categories           []string
	subresources         []subresourceInfo
}

type subresourceInfo struct {
	name, kind string
	group      string // "" for the core group; pods/eviction answers with a policy/v1 Eviction
	verbs      []string
}

var servedResources = []resourceInfo{
	{name: "pods", singular: "pod", kind: "Pod", namespaced: true,
		verbs: []string{"create", "delete", "get", "list", "patch", "update", "watch"},
		short: []string{"po"}, categories: []string{"all"},
		subresources: []subresourceInfo{
			{name: "status", kind: "Pod", verbs: []string{"get"}},
			{name: "log", kind: "Pod", verbs: []string{"get"}},
			// kubectl drain evicts through this when discovery lists it (policy/v1).
			{name: "eviction", kind: "Eviction", group: "policy", verbs: []string{"create"}},
		}},
	{name: "nodes", singular: "node", kind: "Node", verbs: []string{"create", "delete", "get", "list", "patch", "update", "watch"},
		short: []string{"no"},
		subresources: []subresourceInfo{
			{name: "status", kind: "Node", verbs: []string{"get", "patch", "update"}},
		}},
	{name: "events", singular: "event", kind: "Event", namespaced: true, verbs: []string{"get", "list", "watch"}, short: []string{"ev"}},
	{name: "namespaces", singular: "namespace", kind: "Namespace", verbs: []string{"get", "list"}, short: []string{"ns"}},
}

// aggregatedDiscovery reports whether the client accepts the aggregated discovery form (v2).
func aggregatedDiscovery(r *http.Request) bool {
	for _, mt := range strings.Split(r.Header.Get("Accept"), ",") {
		params := map[string]string{}
		for _, kv := range strings.Split(mt, ";")[1:] {
			k, v, _ := strings.Cut(strings.TrimSpace(kv), "=")
			params[k] = v
		}
		if params["g"] == "apidiscovery.k8s.io" && params["v"] == "v2" && params["as"] == "APIGroupDiscoveryList" {
			return true
		}
	}
	return false
}

const aggregatedContentType = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

func writeAggregated(w http.ResponseWriter, list apidiscoveryv2.APIGroupDiscoveryList) {
	list.TypeMeta = metav1.TypeMeta{Kind: "APIGroupDiscoveryList", APIVersion: "apidiscovery.k8s.io/v2"}
	if list.Items == nil {
		list.Items = []apidiscoveryv2.APIGroupDiscovery{}
	}
	writeJSONType(w, http.StatusOK, aggregatedContentType, list)
}

func handleAPI(w http.ResponseWriter, r *http.Request) {
	if aggregatedDiscovery(r) {
		var resources []apidiscoveryv2.APIResourceDiscovery
		for _, ri := range servedResources {
			scope := apidiscoveryv2.ScopeCluster
			if ri.namespaced {
				scope = apidiscoveryv2.ScopeNamespace
			}
			rd := apidiscoveryv2.APIResourceDiscovery{
				Resource:         ri.name,
				ResponseKind:     &metav1.GroupVersionKind{Version: "v1", Kind: ri.kind},
				Scope:            scope,
				SingularResource: ri.singular,
				Verbs:            ri.verbs,
				ShortNames:       ri.short,
				Categories:       ri.categories,
			}
			for _, sr := range ri.subresources {
				rd.Subresources = append(rd.Subresources, apidiscoveryv2.APISubresourceDiscovery{
					Subresource:  sr.name,
					ResponseKind: &metav1.GroupVersionKind{Group: sr.group, Version: "v1", Kind: sr.kind},
					Verbs:        sr.verbs,
				})
			}
			resources = append(resources, rd)
		}
		writeAggregated(w, apidiscoveryv2.APIGroupDiscoveryList{Items: []apidiscoveryv2.APIGroupDiscovery{{
			Versions: []apidiscoveryv2.APIVersionDiscovery{{
				Version:   "v1",
				Resources: resources,
				Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent,
			}},
		}}})
		return
	}
	writeJSON(w, http.StatusOK, metav1.APIVersions{
		TypeMeta:                   metav1.TypeMeta{Kind: "APIVersions"},
		Versions:                   []string{"v1"},
		ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{{ClientCIDR: "0.0.0.0/0", ServerAddress: r.Host}},
	})
}

func handleAPIs(w http.ResponseWriter, r *http.Request) {
	if aggregatedDiscovery(r) {
		writeAggregated(w, apidiscoveryv2.APIGroupDiscoveryList{})
		return
	}
	writeJSON(w, http.StatusOK, metav1.APIGroupList{
		TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"},
		Groups:   []metav1.APIGroup{},
	})
}

func handleAPIV1(w http.ResponseWriter, _ *http.Request) {
	list := metav1.APIResourceList{
		TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
		GroupVersion: "v1",
	}
	for _, ri := range servedResources {
		list.APIResources = append(list.APIResources, metav1.APIResource{
			Name:         ri.name,
			SingularName: ri.singular,
			Namespaced:   ri.namespaced,
			Kind:         ri.kind,
			Verbs:        ri.verbs,
			ShortNames:   ri.short,
			Categories:   ri.categories,
		})
		for _, sr := range ri.subresources {
			list.APIResources = append(list.APIResources, metav1.APIResource{
				Name:       ri.name + "/" + sr.name,
				Namespaced: ri.namespaced,
				Kind:       sr.kind,
				Group:      sr.group,
				Version:    subresourceVersion(sr),
				Verbs:      sr.verbs,
			})
		}
	}
	writeJSON(w, http.StatusOK, list)
}

// subresourceVersion is set only for a subresource of another group, as kube-apiserver does.
func subresourceVersion(sr subresourceInfo) string {
	if sr.group == "" {
		return ""
	}
	return "v1"
}
