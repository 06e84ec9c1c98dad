package admission

import "net/http"

// The bridge between today's authentication (plain HTTP, optional tokens, anonymous otherwise) and
// RBAC: it goes when the API authenticates every request itself (TLS, client certificates, token file,
// and an explicit insecure mode whose user is system:unsecured in system:masters), which defines these
// names too.

// Users and groups of authentication.
const (
	unsecuredUser      = "system:unsecured"
	groupMasters       = "system:masters"
	groupAuthenticated = "system:authenticated"
)

// plainHTTPUser is u, except that a plain-HTTP request when no authentication is configured is the
// unsecured administrator: that mode has no identities to authorize, as kube-apiserver's insecure port.
func (s *Service) plainHTTPUser(r *http.Request, u *userInfo) *userInfo {
	if r.TLS == nil && len(s.cfg.Tokens) == 0 && u != nil && u.Name == anonymousUser {
		return &userInfo{Name: unsecuredUser, Groups: []string{groupMasters, groupAuthenticated}}
	}
	return u
}
