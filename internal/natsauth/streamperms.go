package natsauth

import "github.com/podbus/podbus/bus"

// streams grants an agent the exec, attach and port-forward sessions of its node (internal/podstream):
// it takes session requests and the API's frames, and sends its own frames.
func (g *grants) streams(open, ins, outs string) {
	g.sub(open, ins)
	g.pub(outs)
}

// agentStreams are the stream grants of one node's agent.
func (g *grants) agentStreams(node string) {
	g.streams(bus.SubjStreamOpen(node), bus.SubjStreamIns(node), bus.SubjStreamOuts(node))
}

// anyAgentStreams are the stream grants of a process that runs the agents of many nodes.
func (g *grants) anyAgentStreams() {
	g.streams(bus.SubjStreamOpenPrefix+"*", bus.SubjStreamInPrefix+"*.*", bus.SubjStreamOutPrefix+"*.*")
}

// apiStreams lets the API open sessions on any node and exchange their frames.
func (g *grants) apiStreams() {
	g.pub(bus.SubjStreamOpenPrefix+"*", bus.SubjStreamInPrefix+"*.*")
	g.sub(bus.SubjStreamOutPrefix + "*.*")
}
