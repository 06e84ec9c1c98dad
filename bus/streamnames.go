package bus

// Subjects of kubectl exec, attach and port-forward sessions (internal/podstream): the API opens a session
// with a request on SubjStreamOpen(node), then sends its frames on SubjStreamIn and receives the agent's
// on SubjStreamOut. Each agent may only serve its own node's sessions.
const (
	SubjStreamOpenPrefix = "podbus.stream.open."
	SubjStreamInPrefix   = "podbus.stream.in."
	SubjStreamOutPrefix  = "podbus.stream.out."
)

// SubjStreamOpen is the request subject where node's agent accepts sessions.
func SubjStreamOpen(node string) string { return SubjStreamOpenPrefix + Token(node) }

// SubjStreamIn carries the API's frames of one session to node's agent; SubjStreamIns all of them.
func SubjStreamIn(node, session string) string {
	return SubjStreamInPrefix + Token(node) + "." + Token(session)
}

// SubjStreamIns is every session's input subject of node.
func SubjStreamIns(node string) string { return SubjStreamInPrefix + Token(node) + ".*" }

// SubjStreamOut carries node's agent's frames of one session to the API.
func SubjStreamOut(node, session string) string {
	return SubjStreamOutPrefix + Token(node) + "." + Token(session)
}

// SubjStreamOuts is every session's output subject of node.
func SubjStreamOuts(node string) string { return SubjStreamOutPrefix + Token(node) + ".*" }
