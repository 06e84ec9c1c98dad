package usage

import (
	"errors"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// PodView is one pod of a report as Walk reads it. Its byte slices alias the report, and Containers
// is a buffer Walk reuses: all of it is valid during the call only.
type PodView struct {
	Namespace, Name, UID []byte
	Containers           []ContainerView
}

// ContainerView is one container of a PodView.
type ContainerView struct {
	Name         []byte
	CPUNanoCores uint64
	MemoryBytes  uint64
}

// Walker takes a report's nodes from Walk.
type Walker interface {
	// Node is a node's fields, Pods nil; false skips its pods.
	Node(n Node) bool
	// Pod is each pod of the node, in order.
	Pod(p *PodView)
	// EndNode follows the pods of a node that Node took.
	EndNode()
}

// Walk reads a report as Decode reads it, without building it: a cache that keeps every pod of a
// cluster and takes each node's report every UsageInterval then allocates for what changed only. A
// report Decode refuses is refused before w sees any of it. A JSON report is decoded first.
func Walk(data []byte, w Walker) error {
	if len(data) > 0 && data[0] == '{' {
		r, err := Decode(data)
		if err != nil {
			return err
		}
		var v PodView
		for _, n := range r.Nodes {
			pods := n.Pods
			n.Pods = nil
			if !w.Node(n) {
				continue
			}
			for i := range pods {
				v.set(&pods[i])
				w.Pod(&v)
			}
			w.EndNode()
		}
		return nil
	}
	if err := walkPB(data, w); err != nil {
		return errors.Join(ErrMalformed, err)
	}
	return nil
}

// walkPB is Walk of a protobuf report, its errors not wrapped.
func walkPB(data []byte, w Walker) error {
	if err := validate(data); err != nil {
		return err
	}
	var v PodView
	return fields(data, func(num protowire.Number, typ protowire.Type, nb []byte, _ uint64) error {
		if num != 1 || typ != protowire.BytesType {
			return nil
		}
		n, err := nodeFields(nb)
		if err != nil || !w.Node(n) {
			return err
		}
		err = fields(nb, func(num protowire.Number, typ protowire.Type, pb []byte, _ uint64) error {
			if num != 6 || typ != protowire.BytesType {
				return nil
			}
			if err := v.read(pb); err != nil {
				return err
			}
			w.Pod(&v)
			return nil
		})
		if err == nil {
			w.EndNode()
		}
		return err
	})
}

// nodeFields is a node's own fields, its pods left out.
func nodeFields(data []byte) (Node, error) {
	var n Node
	err := fields(data, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			var err error
			n.Name, err = text(v)
			return err
		case num == 2 && typ == protowire.VarintType:
			if x != 0 {
				n.Time = timeOf(x)
			}
		case num == 3 && typ == protowire.VarintType:
			n.WindowMillis = int64(x)
		case num == 4 && typ == protowire.VarintType:
			n.CPUNanoCores = x
		case num == 5 && typ == protowire.VarintType:
			n.MemoryBytes = x
		}
		return nil
	})
	return n, err
}

// read sets v to a pod's fields as protobuf reads them: the last of a repeated string, every
// container.
func (v *PodView) read(data []byte) error {
	v.Namespace, v.Name, v.UID, v.Containers = nil, nil, nil, v.Containers[:0]
	return fields(data, func(num protowire.Number, typ protowire.Type, f []byte, _ uint64) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case 1:
			v.Namespace = f
		case 2:
			v.Name = f
		case 3:
			v.UID = f
		case 4:
			var c ContainerView
			err := fields(f, func(num protowire.Number, typ protowire.Type, cf []byte, x uint64) error {
				switch {
				case num == 1 && typ == protowire.BytesType:
					c.Name = cf
				case num == 2 && typ == protowire.VarintType:
					c.CPUNanoCores = x
				case num == 3 && typ == protowire.VarintType:
					c.MemoryBytes = x
				}
				return nil
			})
			v.Containers = append(v.Containers, c)
			return err
		}
		return nil
	})
}

// set makes v a view of a decoded pod (a JSON report's).
func (v *PodView) set(p *Pod) {
	v.Namespace, v.Name, v.UID, v.Containers = []byte(p.Namespace), []byte(p.Name), []byte(p.UID), v.Containers[:0]
	for _, c := range p.Containers {
		v.Containers = append(v.Containers, ContainerView{Name: []byte(c.Name), CPUNanoCores: c.CPUNanoCores, MemoryBytes: c.MemoryBytes})
	}
}

var errNoName = errors.New("node without a name")

// validate checks what Decode checks, allocating nothing: the wire form, every string UTF-8, every
// node named.
func validate(data []byte) error {
	return fields(data, func(num protowire.Number, typ protowire.Type, nb []byte, _ uint64) error {
		if num != 1 || typ != protowire.BytesType {
			return nil
		}
		var name []byte
		err := fields(nb, func(num protowire.Number, typ protowire.Type, f []byte, _ uint64) error {
			switch {
			case num == 1 && typ == protowire.BytesType:
				name = f
				return validUTF8(f)
			case num == 6 && typ == protowire.BytesType:
				return validatePod(f)
			}
			return nil
		})
		if err == nil && len(name) == 0 {
			err = errNoName
		}
		return err
	})
}

func validatePod(data []byte) error {
	return fields(data, func(num protowire.Number, typ protowire.Type, f []byte, _ uint64) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case 1, 2, 3:
			return validUTF8(f)
		case 4:
			return fields(f, func(num protowire.Number, typ protowire.Type, cf []byte, _ uint64) error {
				if num == 1 && typ == protowire.BytesType {
					return validUTF8(cf)
				}
				return nil
			})
		}
		return nil
	})
}

func validUTF8(b []byte) error {
	if !utf8.Valid(b) {
		return errUTF8
	}
	return nil
}
