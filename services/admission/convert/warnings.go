package convert

import (
	"fmt"
	"reflect"
	"sort"
	"strings"

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
	w.walk("metadata", reflect.ValueOf(om), reflect.ValueOf(rm))
	oSpec, rSpec := orig.Spec, rt.Spec
	// serviceAccount is an alias of serviceAccountName and is converted into it.
	if oSpec.DeprecatedServiceAccount == rSpec.ServiceAccountName {
		oSpec.DeprecatedServiceAccount = rSpec.DeprecatedServiceAccount
	}
	w.walk("spec", reflect.ValueOf(oSpec), reflect.ValueOf(rSpec))
	sort.Strings(w.lost)
	return w.lost
}

type lossWalker struct{ lost []string }

var (
	quantityType = reflect.TypeOf(resource.Quantity{})
	timeType     = reflect.TypeOf(metav1.Time{})
	intstrType   = reflect.TypeOf(intstr.IntOrString{})
)

func (w *lossWalker) report(path string) {
	w.lost = append(w.lost, path+": "+unsupported)
}

// walk reports path when orig is set and differs from rt; it descends so the warning names the innermost
// dropped field (spec.volumes[0].hostPath rather than spec.volumes[0]).
func (w *lossWalker) walk(path string, orig, rt reflect.Value) {
	if orig.IsZero() {
		return
	}
	switch orig.Type() {
	case quantityType:
		q1, q2 := orig.Interface().(resource.Quantity), rt.Interface().(resource.Quantity)
		if q1.Cmp(q2) != 0 {
			w.report(path)
		}
		return
	case timeType:
		if !orig.Interface().(metav1.Time).Time.Equal(rt.Interface().(metav1.Time).Time) {
			w.report(path)
		}
		return
	case intstrType:
		a, b := orig.Interface().(intstr.IntOrString), rt.Interface().(intstr.IntOrString)
		if a.String() != b.String() {
			w.report(path)
		}
		return
	}
	switch orig.Kind() {
	case reflect.Pointer:
		if rt.IsNil() {
			w.report(path)
			return
		}
		w.walk(path, orig.Elem(), rt.Elem())
	case reflect.Struct:
		t := orig.Type()
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, inline := jsonName(f)
			if name == "-" {
				continue
			}
			p := path
			if !inline {
				p = path + "." + name
			}
			w.walk(p, orig.Field(i), rt.Field(i))
		}
	case reflect.Slice:
		if orig.Len() != rt.Len() {
			w.report(path)
			return
		}
		for i := 0; i < orig.Len(); i++ {
			w.walk(fmt.Sprintf("%s[%d]", path, i), orig.Index(i), rt.Index(i))
		}
	case reflect.Map:
		keys := orig.MapKeys()
		sort.Slice(keys, func(i, j int) bool { return fmt.Sprint(keys[i]) < fmt.Sprint(keys[j]) })
		for _, k := range keys {
			rv := rt.MapIndex(k)
			if !rv.IsValid() {
				w.report(fmt.Sprintf("%s[%v]", path, k))
				continue
			}
			w.walk(fmt.Sprintf("%s[%v]", path, k), orig.MapIndex(k), rv)
		}
	default:
		if !reflect.DeepEqual(orig.Interface(), rt.Interface()) {
			w.report(path)
		}
	}
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
