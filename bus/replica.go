package bus

import (
	"fmt"
	"strings"
)

// CheckReplica says why a service replica named id cannot run on conn, wrapped in errConfig (the
// service's own sentinel), or nil when it can: the id names the replica's actor, consumers and message
// ids, so it must be one subject token, and the connection must be open.
func CheckReplica(errConfig error, id string, conn *Conn) error {
	if id == "" || strings.ContainsAny(id, ".*> \t") {
		return fmt.Errorf("%w: ID %q must be one subject token", errConfig, id)
	}
	if conn == nil || conn.NC == nil || conn.JS == nil {
		return fmt.Errorf("%w: no bus connection", errConfig)
	}
	return nil
}
