package convert

import (
	"fmt"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The checks kube-apiserver makes of the volume sources podbus mounts (validation.go's
// validateVolumeSource and its helpers), and of subPath.

// downwardFieldPaths are the fields a downwardAPI volume may name (status.podIP and the like are for
// environment variables only, as in kube).
var downwardFieldPaths = sets.New("metadata.name", "metadata.namespace", "metadata.uid", "metadata.labels", "metadata.annotations")

var downwardResources = sets.New("limits.cpu", "limits.memory", "limits.ephemeral-storage",
	"requests.cpu", "requests.memory", "requests.ephemeral-storage")

var hostPathTypes = sets.New(corev1.HostPathUnset, corev1.HostPathDirectoryOrCreate, corev1.HostPathDirectory,
	corev1.HostPathFileOrCreate, corev1.HostPathFile, corev1.HostPathSocket, corev1.HostPathCharDev, corev1.HostPathBlockDev)

// validateVolumeSource checks v's source, idx being spec.volumes[i].
func validateVolumeSource(v *corev1.Volume, idx *field.Path) field.ErrorList {
	var errs field.ErrorList
	n := 0
	count := func(set bool) {
		if set {
			n++
		}
	}
	s := &v.VolumeSource
	count(s.EmptyDir != nil)
	count(s.ConfigMap != nil)
	count(s.Secret != nil)
	count(s.HostPath != nil)
	count(s.DownwardAPI != nil)
	count(s.Projected != nil)
	if n > 1 {
		errs = append(errs, field.Forbidden(idx, "may not specify more than 1 volume type"))
	}
	if ed := s.EmptyDir; ed != nil && ed.Medium != corev1.StorageMediumDefault && ed.Medium != corev1.StorageMediumMemory {
		errs = append(errs, field.NotSupported(idx.Child("emptyDir", "medium"), ed.Medium, []string{"", "Memory"}))
	}
	if cm := s.ConfigMap; cm != nil {
		p := idx.Child("configMap")
		if cm.Name == "" {
			errs = append(errs, field.Required(p.Child("name"), ""))
		}
		errs = append(errs, validateMode(cm.DefaultMode, p.Child("defaultMode"))...)
		errs = append(errs, validateKeyToPaths(cm.Items, p.Child("items"))...)
	}
	if sec := s.Secret; sec != nil {
		p := idx.Child("secret")
		if sec.SecretName == "" {
			errs = append(errs, field.Required(p.Child("secretName"), ""))
		}
		errs = append(errs, validateMode(sec.DefaultMode, p.Child("defaultMode"))...)
		errs = append(errs, validateKeyToPaths(sec.Items, p.Child("items"))...)
	}
	if hp := s.HostPath; hp != nil {
		p := idx.Child("hostPath")
		if hp.Path == "" {
			errs = append(errs, field.Required(p.Child("path"), ""))
		} else if strings.Contains("/"+hp.Path+"/", "/../") {
			errs = append(errs, field.Invalid(p.Child("path"), hp.Path, "must not contain '..'"))
		}
		if hp.Type != nil && !hostPathTypes.Has(*hp.Type) {
			errs = append(errs, field.NotSupported(p.Child("type"), *hp.Type, sets.List(hostPathTypes)))
		}
	}
	if d := s.DownwardAPI; d != nil {
		p := idx.Child("downwardAPI")
		errs = append(errs, validateMode(d.DefaultMode, p.Child("defaultMode"))...)
		errs = append(errs, validateDownwardItems(d.Items, p.Child("items"))...)
	}
	if pr := s.Projected; pr != nil {
		p := idx.Child("projected")
		errs = append(errs, validateMode(pr.DefaultMode, p.Child("defaultMode"))...)
		paths := sets.New[string]()
		for i, src := range pr.Sources {
			sp := p.Child("sources").Index(i)
			n := 0
			var items []string
			if src.ConfigMap != nil {
				n++
				if src.ConfigMap.Name == "" {
					errs = append(errs, field.Required(sp.Child("configMap", "name"), ""))
				}
				errs = append(errs, validateKeyToPaths(src.ConfigMap.Items, sp.Child("configMap", "items"))...)
				for _, it := range src.ConfigMap.Items {
					items = append(items, it.Path)
				}
			}
			if src.Secret != nil {
				n++
				if src.Secret.Name == "" {
					errs = append(errs, field.Required(sp.Child("secret", "name"), ""))
				}
				errs = append(errs, validateKeyToPaths(src.Secret.Items, sp.Child("secret", "items"))...)
				for _, it := range src.Secret.Items {
					items = append(items, it.Path)
				}
			}
			if src.DownwardAPI != nil {
				n++
				errs = append(errs, validateDownwardItems(src.DownwardAPI.Items, sp.Child("downwardAPI", "items"))...)
				for _, it := range src.DownwardAPI.Items {
					items = append(items, it.Path)
				}
			}
			if src.ServiceAccountToken != nil || src.ClusterTrustBundle != nil {
				n++
			}
			if n != 1 {
				errs = append(errs, field.Forbidden(sp, "may not specify more than 1 volume type per source"))
			}
			for _, it := range items {
				if paths.Has(it) {
					errs = append(errs, field.Duplicate(sp, it))
				}
				paths.Insert(it)
			}
		}
	}
	return errs
}

func validateMode(mode *int32, p *field.Path) field.ErrorList {
	if mode != nil && (*mode < 0 || *mode > 0o777) {
		return field.ErrorList{field.Invalid(p, *mode, "must be a number between 0 and 0777 (octal), both inclusive")}
	}
	return nil
}

func validateKeyToPaths(items []corev1.KeyToPath, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, it := range items {
		ip := p.Index(i)
		if it.Key == "" {
			errs = append(errs, field.Required(ip.Child("key"), ""))
		}
		errs = append(errs, validateLocalPath(it.Path, true, ip.Child("path"))...)
		errs = append(errs, validateMode(it.Mode, ip.Child("mode"))...)
	}
	return errs
}

func validateDownwardItems(items []corev1.DownwardAPIVolumeFile, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, it := range items {
		ip := p.Index(i)
		errs = append(errs, validateLocalPath(it.Path, true, ip.Child("path"))...)
		errs = append(errs, validateMode(it.Mode, ip.Child("mode"))...)
		switch {
		case it.FieldRef != nil && it.ResourceFieldRef != nil:
			errs = append(errs, field.Invalid(ip, "resource", "fieldRef and resourceFieldRef can not be specified simultaneously"))
		case it.FieldRef != nil:
			fp := it.FieldRef.FieldPath
			base, _, subscript := strings.Cut(fp, "[")
			if !downwardFieldPaths.Has(fp) && !(subscript && (base == "metadata.labels" || base == "metadata.annotations") && strings.HasSuffix(fp, "']")) {
				errs = append(errs, field.NotSupported(ip.Child("fieldRef", "fieldPath"), fp, sets.List(downwardFieldPaths)))
			}
		case it.ResourceFieldRef != nil:
			if !downwardResources.Has(it.ResourceFieldRef.Resource) {
				errs = append(errs, field.NotSupported(ip.Child("resourceFieldRef", "resource"), it.ResourceFieldRef.Resource, sets.List(downwardResources)))
			}
		default:
			errs = append(errs, field.Required(ip, "one of fieldRef and resourceFieldRef is required"))
		}
	}
	return errs
}

// validateLocalPath: relative, without a '..' element (kube's validateLocalNonReservedPath).
func validateLocalPath(p string, required bool, fp *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch {
	case p == "":
		if required {
			errs = append(errs, field.Required(fp, ""))
		}
		return errs
	case path.IsAbs(p):
		errs = append(errs, field.Invalid(fp, p, "must be a relative path"))
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			errs = append(errs, field.Invalid(fp, p, "must not contain '..'"))
			break
		}
	}
	if strings.HasPrefix(p, "..") {
		errs = append(errs, field.Invalid(fp, p, fmt.Sprintf("must not start with %q", "..")))
	}
	return errs
}
