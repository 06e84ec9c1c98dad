package convert

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

const unsupported = "not supported by podbus, ignored"

// lostFields compares a pod with what survives a trip through the protobuf form and names every set field
// that did not survive. Deriving the warnings from the conversion itself means a field can't be dropped
// silently just because nobody remembered to list it. Status is not inspected: clients cannot set it.
func lostFields(orig, rt *corev1.Pod) []string {
	w := &lossWalker{}
	om, rm := orig.ObjectMeta, rt.ObjectMeta
	//lint:ignore SA1019 SelfLink is deprecated but still decoded from clients
	om.ResourceVersion, om.ManagedFields, om.SelfLink = "", nil, ""
	w.walkAt(pathSeg{name: "metadata"}, reflect.ValueOf(om), reflect.ValueOf(rm))
	oSpec, rSpec := orig.Spec, rt.Spec
	// serviceAccount is an alias of serviceAccountName and is converted into it.
	if oSpec.DeprecatedServiceAccount == rSpec.ServiceAccountName {
		oSpec.DeprecatedServiceAccount = rSpec.DeprecatedServiceAccount
	}
	w.walkAt(pathSeg{name: "spec"}, reflect.ValueOf(oSpec), reflect.ValueOf(rSpec))
	sort.Strings(w.lost)
	return w.lost
}

// lossWalker walks a pod and its round trip side by side. The path of the field being walked is a stack
// of segments, made into a string only for a field that is reported: most fields are not.
type lossWalker struct {
	lost []string
	segs []pathSeg
}

// pathSeg is one step of a field path: .name, [index] or [key].
type pathSeg struct {
	name  string
	index int
	kind  segKind
}

type segKind uint8

const (
	segField segKind = iota
	segIndex
	segKey
)

var (
	quantityType = reflect.TypeOf(resource.Quantity{})
	timeType     = reflect.TypeOf(metav1.Time{})
	intstrType   = reflect.TypeOf(intstr.IntOrString{})
)

func (w *lossWalker) report() {
	var b strings.Builder
	for i, s := range w.segs {
		switch s.kind {
		case segField:
			if i > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s.name)
		case segIndex:
			fmt.Fprintf(&b, "[%d]", s.index)
		case segKey:
			b.WriteString("[" + s.name + "]")
		}
	}
	w.lost = append(w.lost, b.String()+": "+unsupported)
}

// walkAt walks orig and rt as the field named by seg under the current path.
func (w *lossWalker) walkAt(seg pathSeg, orig, rt reflect.Value) {
	w.segs = append(w.segs, seg)
	w.walk(orig, rt)
	w.segs = w.segs[:len(w.segs)-1]
}

// walk reports the current path when orig is set and differs from rt; it descends so the warning names
// the innermost dropped field (spec.volumes[0].hostPath rather than spec.volumes[0]).
func (w *lossWalker) walk(orig, rt reflect.Value) {
	if orig.IsZero() {
		return
	}
	switch orig.Type() {
	case quantityType:
		q1, q2 := orig.Interface().(resource.Quantity), rt.Interface().(resource.Quantity)
		if q1.Cmp(q2) != 0 {
			w.report()
		}
		return
	case timeType:
		if !orig.Interface().(metav1.Time).Time.Equal(rt.Interface().(metav1.Time).Time) {
			w.report()
		}
		return
	case intstrType:
		a, b := orig.Interface().(intstr.IntOrString), rt.Interface().(intstr.IntOrString)
		if a.String() != b.String() {
			w.report()
		}
		return
	}
	switch orig.Kind() {
	case reflect.Pointer:
		if rt.IsNil() {
			w.report()
			return
		}
		w.walk(orig.Elem(), rt.Elem())
	case reflect.Struct:
		for _, f := range fieldsOf(orig.Type()) {
			if f.inline {
				w.walk(orig.Field(f.index), rt.Field(f.index))
				continue
			}
			w.walkAt(pathSeg{name: f.name}, orig.Field(f.index), rt.Field(f.index))
		}
	case reflect.Slice:
		if orig.Len() != rt.Len() {
			w.report()
			return
		}
		for i := 0; i < orig.Len(); i++ {
			w.walkAt(pathSeg{index: i, kind: segIndex}, orig.Index(i), rt.Index(i))
		}
	case reflect.Map:
		// Keys in any order: lostFields sorts what it reports.
		iter := orig.MapRange()
		for iter.Next() {
			k := iter.Key()
			seg := pathSeg{name: fmt.Sprint(k), kind: segKey}
			if k.Kind() == reflect.String {
				seg.name = k.String()
			}
			rv := rt.MapIndex(k)
			if !rv.IsValid() {
				w.segs = append(w.segs, seg)
				w.report()
				w.segs = w.segs[:len(w.segs)-1]
				continue
			}
			w.walkAt(seg, iter.Value(), rv)
		}
	case reflect.String:
		if orig.String() != rt.String() {
			w.report()
		}
	case reflect.Bool:
		if orig.Bool() != rt.Bool() {
			w.report()
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if orig.Int() != rt.Int() {
			w.report()
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if orig.Uint() != rt.Uint() {
			w.report()
		}
	default:
		if !reflect.DeepEqual(orig.Interface(), rt.Interface()) {
			w.report()
		}
	}
}

// structField is an exported field of a struct type as the walk sees it.
type structField struct {
	index  int
	name   string // JSON name
	inline bool   // inlined into its parent (embedded, or tagged inline)
}

// structFields caches fieldsOf by type: the walk visits the same few types for every pod.
var structFields sync.Map // reflect.Type -> []structField

// fieldsOf is t's exported fields that have a JSON form.
func fieldsOf(t reflect.Type) []structField {
	if fs, ok := structFields.Load(t); ok {
		return fs.([]structField)
	}
	var fs []structField
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, inline := jsonName(f)
		if name == "-" {
			continue
		}
		fs = append(fs, structField{index: i, name: name, inline: inline})
	}
	structFields.Store(t, fs)
	return fs
}

// jsonName returns the field's JSON name and whether it is inlined into its parent.
func jsonName(f reflect.StructField) (string, bool) {
	tag := f.Tag.Get("json")
	name, opts, _ := strings.Cut(tag, ",")
	if f.Anonymous || strings.Contains(opts, "inline") {
		return "", true
	}
	if name == "" {
		name = f.Name
	}
	return name, false
}
