package framework

import (
	"iter"
	"slices"
	"strings"
)

// NodeList is an immutable, name-ordered list of NodeInfos kept by value in small chunks:
//   - by value, so that a cycle walking hundreds of nodes reads them from consecutive memory rather
//     than chasing a pointer per node to a NodeInfo somewhere on the heap;
//   - in chunks behind pointers, so that the cache can change one node after handing a list to a
//     snapshot by copying one chunk and the table of chunk pointers instead of the whole list. The
//     chunk size trades the copy per change against the speed of the cycles' scans, which prefer
//     long runs of consecutive nodes.
//
// The *NodeInfo it yields point into the chunks; they stay valid and unchanged for as long as they
// are held.
type NodeList struct {
	chunks []*nodeChunk
	starts []int // starts[i] is the index of chunks[i]'s first node; one more entry: the length
}

// A nodeChunk never changes once a list holds it.
type nodeChunk struct{ nodes []NodeInfo }

// Chunk sizes: a chunk is split past maxChunk into two of chunkSize.
const (
	chunkSize = 8
	maxChunk  = 2 * chunkSize
)

// NodeListOf copies nodes, which must be sorted by name.
func NodeListOf(nodes []*NodeInfo) NodeList {
	var chunks []*nodeChunk
	for len(nodes) > 0 {
		n := min(chunkSize, len(nodes))
		c := make([]NodeInfo, n)
		for i, info := range nodes[:n] {
			c[i] = *info
		}
		chunks = append(chunks, &nodeChunk{nodes: c})
		nodes = nodes[n:]
	}
	return NodeList{chunks: chunks, starts: startsOf(chunks)}
}

func startsOf(chunks []*nodeChunk) []int {
	starts := make([]int, len(chunks)+1)
	for i, c := range chunks {
		starts[i+1] = starts[i] + len(c.nodes)
	}
	return starts
}

// Len is the number of nodes.
func (l NodeList) Len() int {
	if len(l.starts) == 0 {
		return 0
	}
	return l.starts[len(l.starts)-1]
}

// NumChunks is the number of chunks.
func (l NodeList) NumChunks() int { return len(l.chunks) }

// Chunk returns chunk i, which must not be modified. A chunk never changes, and a change to a node
// comes in a new chunk, so callers may remember what they computed over a chunk by its first element.
func (l NodeList) Chunk(i int) []NodeInfo { return l.chunks[i].nodes }

// sortSearchInts returns the chunk holding index i: the last c with starts[c] <= i.
func sortSearchInts(starts []int, i int) int {
	lo, hi := 0, len(starts)-1
	for lo < hi-1 {
		mid := (lo + hi) / 2
		if starts[mid] <= i {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// From yields every node once, starting at index start and wrapping around.
func (l NodeList) From(start int) iter.Seq[*NodeInfo] {
	return func(yield func(*NodeInfo) bool) {
		n := l.Len()
		if n == 0 {
			return
		}
		c := sortSearchInts(l.starts, start)
		j := start - l.starts[c]
		for seen := 0; seen < n; {
			chunk := l.chunks[c].nodes
			for ; j < len(chunk); j++ {
				if !yield(&chunk[j]) {
					return
				}
				if seen++; seen == n {
					return
				}
			}
			c, j = (c+1)%len(l.chunks), 0
		}
	}
}

// At returns the node at index i.
func (l NodeList) At(i int) *NodeInfo {
	c := sortSearchInts(l.starts, i)
	return &l.chunks[c].nodes[i-l.starts[c]]
}

// Flatten returns the nodes as one new slice.
func (l NodeList) Flatten() []*NodeInfo {
	out := make([]*NodeInfo, 0, l.Len())
	for _, c := range l.chunks {
		for i := range c.nodes {
			out = append(out, &c.nodes[i])
		}
	}
	return out
}

// Get returns the node called name, or nil.
func (l NodeList) Get(name string) *NodeInfo {
	c, i, found := l.find(name)
	if !found {
		return nil
	}
	return &l.chunks[c].nodes[i]
}

// find locates name: its chunk and position, or where it would be inserted.
func (l NodeList) find(name string) (chunk, pos int, found bool) {
	if len(l.chunks) == 0 {
		return 0, 0, false
	}
	// The last chunk whose first node is <= name (or the first chunk).
	c := max(0, sortSearchChunks(l.chunks, name)-1)
	i, found := slices.BinarySearchFunc(l.chunks[c].nodes, name, func(n NodeInfo, name string) int { return strings.Compare(n.name, name) })
	return c, i, found
}

// sortSearchChunks returns the number of chunks whose first node is <= name.
func sortSearchChunks(chunks []*nodeChunk, name string) int {
	lo, hi := 0, len(chunks)
	for lo < hi {
		mid := (lo + hi) / 2
		if chunks[mid].nodes[0].name <= name {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// NodeListBuilder maintains a NodeList under changes, copy-on-write: List shares the current chunks
// with the caller, and the next Set copies only the chunk it changes and the chunk table. The starts
// are shared too, and replaced only when a node comes or goes.
type NodeListBuilder struct {
	chunks      []*nodeChunk
	starts      []int
	owned       []bool // chunk i is not shared with any list handed out, so it may change in place
	tableShared bool
	list        *NodeList // the list handed out since the last change, if any
}

// List returns the current list; it never changes afterwards.
func (b *NodeListBuilder) List() NodeList {
	if b.list == nil {
		b.list = &NodeList{chunks: b.chunks, starts: b.starts}
		b.tableShared = true
		clear(b.owned)
	}
	return *b.list
}

// Set puts a copy of info under name, or removes name when info is nil.
func (b *NodeListBuilder) Set(name string, info *NodeInfo) {
	c, i, found := NodeList{chunks: b.chunks}.find(name)
	if !found && info == nil {
		return
	}
	b.list = nil
	if b.tableShared {
		b.chunks = slices.Clone(b.chunks)
		b.tableShared = false
	}
	if len(b.chunks) == 0 {
		b.chunks = []*nodeChunk{{nodes: []NodeInfo{*info}}}
		b.owned = []bool{true}
		b.starts = startsOf(b.chunks)
		return
	}
	if !b.owned[c] {
		b.chunks[c] = &nodeChunk{nodes: slices.Clip(slices.Clone(b.chunks[c].nodes))}
		b.owned[c] = true
	}
	ch := b.chunks[c]
	switch {
	case info == nil:
		ch.nodes = slices.Delete(ch.nodes, i, i+1)
		if len(ch.nodes) == 0 {
			b.chunks = slices.Delete(b.chunks, c, c+1)
			b.owned = slices.Delete(b.owned, c, c+1)
		}
	case found:
		ch.nodes[i] = *info
		return // same places: the starts stay
	default:
		ch.nodes = slices.Insert(ch.nodes, i, *info)
		if len(ch.nodes) > maxChunk {
			whole := ch.nodes
			ch.nodes = slices.Clone(whole[:chunkSize])
			b.chunks = slices.Insert(b.chunks, c+1, &nodeChunk{nodes: slices.Clone(whole[chunkSize:])})
			b.owned = slices.Insert(b.owned, c+1, true)
		}
	}
	b.starts = startsOf(b.chunks) // a new slice: lists handed out keep theirs
}
