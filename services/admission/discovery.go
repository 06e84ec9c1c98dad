package admission

import (
	"net/http"
	"runtime"
	"slices"
	"strings"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
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

type subresourceInfo struct {
	name, kind string
	group      string // "" for the kind's own group; pods/eviction answers with a policy/v1 Eviction
	verbs      []string
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

// resourceDiscovery is a kind's entry in the aggregated discovery document.
func resourceDiscovery(k *kind) apidiscoveryv2.APIResourceDiscovery {
	scope := apidiscoveryv2.ScopeCluster
	if k.namespaced {
		scope = apidiscoveryv2.ScopeNamespace
	}
	rd := apidiscoveryv2.APIResourceDiscovery{
		Resource:         k.resource,
		ResponseKind:     &metav1.GroupVersionKind{Group: k.group, Version: k.version, Kind: k.kind},
		Scope:            scope,
		SingularResource: k.singular,
		Verbs:            k.servedVerbs(),
		ShortNames:       k.shortNames,
		Categories:       k.categories,
	}
	for _, sr := range k.subresources {
		group, version := k.group, k.version
		if sr.group != "" {
			group, version = sr.group, "v1"
		}
		rd.Subresources = append(rd.Subresources, apidiscoveryv2.APISubresourceDiscovery{
			Subresource:  sr.name,
			ResponseKind: &metav1.GroupVersionKind{Group: group, Version: version, Kind: sr.kind},
			Verbs:        sr.verbs,
		})
	}
	return rd
}

// groupDiscovery is one group's entry in the aggregated discovery document.
func (s *Service) groupDiscovery(group string) apidiscoveryv2.APIGroupDiscovery {
	g := apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: group}}
	for _, gv := range s.reg.groupVersions() {
		if gv.Group != group {
			continue
		}
		vd := apidiscoveryv2.APIVersionDiscovery{Version: gv.Version, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent}
		for _, k := range s.reg.in(gv) {
			vd.Resources = append(vd.Resources, resourceDiscovery(k))
		}
		g.Versions = append(g.Versions, vd)
	}
	return g
}

// groups lists the named groups (the core group is served under /api).
func (s *Service) groups() []string {
	var out []string
	for _, gv := range s.reg.groupVersions() {
		if gv.Group != "" && !slices.Contains(out, gv.Group) {
			out = append(out, gv.Group)
		}
	}
	return out
}

func (s *Service) handleAPI(w http.ResponseWriter, r *http.Request) {
	if aggregatedDiscovery(r) {
		writeAggregated(w, apidiscoveryv2.APIGroupDiscoveryList{Items: []apidiscoveryv2.APIGroupDiscovery{s.groupDiscovery("")}})
		return
	}
	writeJSON(w, http.StatusOK, metav1.APIVersions{
		TypeMeta:                   metav1.TypeMeta{Kind: "APIVersions"},
		Versions:                   []string{"v1"},
		ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{{ClientCIDR: "0.0.0.0/0", ServerAddress: r.Host}},
	})
}

func (s *Service) handleAPIs(w http.ResponseWriter, r *http.Request) {
	if aggregatedDiscovery(r) {
		var list apidiscoveryv2.APIGroupDiscoveryList
		for _, g := range s.groups() {
			list.Items = append(list.Items, s.groupDiscovery(g))
		}
		writeAggregated(w, list)
		return
	}
	out := metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{}}
	for _, g := range s.groups() {
		out.Groups = append(out.Groups, s.apiGroup(g))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Service) apiGroup(group string) metav1.APIGroup {
	g := metav1.APIGroup{TypeMeta: metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}, Name: group}
	for _, gv := range s.reg.groupVersions() {
		if gv.Group == group {
			g.Versions = append(g.Versions, metav1.GroupVersionForDiscovery{GroupVersion: gv.String(), Version: gv.Version})
		}
	}
	if len(g.Versions) > 0 {
		g.PreferredVersion = g.Versions[0]
	}
	return g
}

// handleAPIGroup serves /apis/<group>.
func (s *Service) handleAPIGroup(w http.ResponseWriter, r *http.Request, group string) {
	if !slices.Contains(s.groups(), group) {
		writeStatus(w, notFoundPath(r.URL.Path))
		return
	}
	writeJSON(w, http.StatusOK, s.apiGroup(group))
}

// handleResourceList serves /api/v1 and /apis/<group>/<version>.
func (s *Service) handleResourceList(w http.ResponseWriter, _ *http.Request, gv schema.GroupVersion) {
	list := metav1.APIResourceList{
		TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
		GroupVersion: gv.String(),
	}
	for _, k := range s.reg.in(gv) {
		list.APIResources = append(list.APIResources, metav1.APIResource{
			Name:         k.resource,
			SingularName: k.singular,
			Namespaced:   k.namespaced,
			Kind:         k.kind,
			Verbs:        k.servedVerbs(),
			ShortNames:   k.shortNames,
			Categories:   k.categories,
		})
		for _, sr := range k.subresources {
			list.APIResources = append(list.APIResources, metav1.APIResource{
				Name:       k.resource + "/" + sr.name,
				Namespaced: k.namespaced,
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
