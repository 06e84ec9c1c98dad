package framework

import (
	"iter"
	"slices"
	"strings"
)

// NodeList is an immutable, name-ordered list of NodeInfos kept by value in chunks:
//   - by value, so that a cycle walking hundreds of nodes reads them from consecutive memory (one
//     pointer per node to a NodeInfo somewhere on the heap cost a cache miss each, which was most of
//     a cycle at 5,000 nodes);
//   - in chunks, so that the cache can change one node after handing a list to a snapshot by copying
//     one chunk and the chunk table instead of the whole list.
//
// The *NodeInfo it yields point into the chunks; they stay valid and unchanged for as long as they
// are held.
type NodeList struct {
	chunks [][]NodeInfo
	starts []int // starts[i] is the index of chunks[i][0]; one more entry: the length
}

// Chunk sizes: a chunk is split past maxChunk into two of chunkSize.
const (
	chunkSize = 32
	maxChunk  = 2 * chunkSize
)

// NodeListOf copies nodes, which must be sorted by name.
func NodeListOf(nodes []*NodeInfo) NodeList {
	var chunks [][]NodeInfo
	for len(nodes) > 0 {
		n := min(chunkSize, len(nodes))
		c := make([]NodeInfo, n)
		for i, info := range nodes[:n] {
			c[i] = *info
		}
		chunks = append(chunks, c)
		nodes = nodes[n:]
	}
	return newNodeList(chunks)
}

func newNodeList(chunks [][]NodeInfo) NodeList {
	starts := make([]int, len(chunks)+1)
	for i, c := range chunks {
		starts[i+1] = starts[i] + len(c)
	}
	return NodeList{chunks: chunks, starts: starts}
}

// Len is the number of nodes.
func (l NodeList) Len() int {
	if len(l.starts) == 0 {
		return 0
	}
	return l.starts[len(l.starts)-1]
}

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
			chunk := l.chunks[c]
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
	return &l.chunks[c][i-l.starts[c]]
}

// Flatten returns the nodes as one new slice.
func (l NodeList) Flatten() []*NodeInfo {
	out := make([]*NodeInfo, 0, l.Len())
	for _, c := range l.chunks {
		for i := range c {
			out = append(out, &c[i])
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
	return &l.chunks[c][i]
}

// find locates name: its chunk and position, or where it would be inserted.
func (l NodeList) find(name string) (chunk, pos int, found bool) {
	if len(l.chunks) == 0 {
		return 0, 0, false
	}
	// The last chunk whose first node is <= name (or the first chunk).
	c := max(0, sortSearchChunks(l.chunks, name)-1)
	i, found := slices.BinarySearchFunc(l.chunks[c], name, func(n NodeInfo, name string) int { return strings.Compare(n.name, name) })
	return c, i, found
}

// sortSearchChunks returns the number of chunks whose first node is <= name.
func sortSearchChunks(chunks [][]NodeInfo, name string) int {
	lo, hi := 0, len(chunks)
	for lo < hi {
		mid := (lo + hi) / 2
		if chunks[mid][0].name <= name {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// NodeListBuilder maintains a NodeList under changes, copy-on-write: List shares the current chunks
// with the caller, and the next Set copies only the chunk it changes and the chunk table.
type NodeListBuilder struct {
	chunks      [][]NodeInfo
	owned       []bool // chunk i is not shared with any list handed out, so it may change in place
	tableShared bool
	list        *NodeList // the list handed out since the last change, if any
}

// List returns the current list; it never changes afterwards.
func (b *NodeListBuilder) List() NodeList {
	if b.list == nil {
		l := newNodeList(b.chunks)
		b.list = &l
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
		b.chunks = [][]NodeInfo{{*info}}
		b.owned = []bool{true}
		return
	}
	if !b.owned[c] {
		b.chunks[c] = slices.Clip(slices.Clone(b.chunks[c]))
		b.owned[c] = true
	}
	switch {
	case info == nil:
		b.chunks[c] = slices.Delete(b.chunks[c], i, i+1)
		if len(b.chunks[c]) == 0 {
			b.chunks = slices.Delete(b.chunks, c, c+1)
			b.owned = slices.Delete(b.owned, c, c+1)
		}
	case found:
		b.chunks[c][i] = *info
	default:
		b.chunks[c] = slices.Insert(b.chunks[c], i, *info)
		if len(b.chunks[c]) > maxChunk {
			whole := b.chunks[c]
			lo, hi := slices.Clone(whole[:chunkSize]), slices.Clone(whole[chunkSize:])
			b.chunks[c] = lo
			b.chunks = slices.Insert(b.chunks, c+1, hi)
			b.owned = slices.Insert(b.owned, c+1, true)
		}
	}
}
