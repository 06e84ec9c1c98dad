package podlogs

// LogRequest asks a node's agent for a container's logs: JSON on the core NATS request subject
// SubjLogs(node), answered with a LogResponse. Logs are read, never state, so they stay off JetStream.
type LogRequest struct {
	Namespace    string `json:"namespace"`
	Name         string `json:"name"`
	UID          string `json:"uid"`
	Container    string `json:"container"` // default: the pod's first container
	Previous     bool   `json:"previous,omitempty"`
	Timestamps   bool   `json:"timestamps,omitempty"`
	TailLines    *int64 `json:"tailLines,omitempty"`
	SinceSeconds *int64 `json:"sinceSeconds,omitempty"`
	LimitBytes   *int64 `json:"limitBytes,omitempty"`
}

// LogResponse is the agent's answer: the log text, or an error with an HTTP status code.
type LogResponse struct {
	Logs  string `json:"logs"`
	Error string `json:"error,omitempty"`
	Code  int    `json:"code,omitempty"`
}

// QueueLogs is the queue group of the agents answering log requests.
const QueueLogs = "agent"
