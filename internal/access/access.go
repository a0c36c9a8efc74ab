// Package access says which nodes a namespace's crawlers may reach, as the cluster
// administrator says it in the ConfigMap isochron-node-access: the taints they may
// tolerate, and the labels their nodes must carry. A toleration is how a crawler reaches
// a node its owner tainted for others to keep off; without this, any namespace could
// write `tolerations: [{operator: Exists}]` and hold real-time CPUs on every node.
package access

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/placement"
)

// The ConfigMap's keys: KeyTolerations holds the taint keys (comma-separated) every
// namespace's crawlers may tolerate, KeyTolerations + "." + <namespace> those one
// namespace may tolerate besides, and KeyNodeSelector + "." + <namespace> the labels
// (k=v, comma-separated) every node of that namespace's crawlers must carry. AnyTaint
// as a key allows every taint, a toleration without a key among them.
const (
	KeyTolerations  = "tolerations"
	KeyNodeSelector = "nodeSelector"
	AnyTaint        = "*"
)

// Rules are the administrator's rules of reach; the zero value lets no namespace
// tolerate any taint, and selects no node for any.
type Rules struct {
	tolerable map[string][]string          // namespace ("" for every one) -> taint keys
	selectors map[string]map[string]string // namespace -> labels its crawlers' nodes carry
}

// Parse reads the ConfigMap's data; an error names the key and what is wrong with it.
func Parse(data map[string]string) (Rules, error) {
	r := Rules{tolerable: map[string][]string{}, selectors: map[string]map[string]string{}}
	for _, k := range slices.Sorted(maps.Keys(data)) {
		v := data[k]
		kind, ns, scoped := strings.Cut(k, ".")
		if scoped {
			if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
				return Rules{}, fmt.Errorf("key %q: %q is not a namespace name: %s", k, ns, strings.Join(errs, "; "))
			}
		}
		switch kind {
		case KeyTolerations:
			for _, key := range list(v) {
				if key != AnyTaint {
					if errs := validation.IsQualifiedName(key); len(errs) > 0 {
						return Rules{}, fmt.Errorf("key %q: %q is not a taint key: %s", k, key, strings.Join(errs, "; "))
					}
				}
				r.tolerable[ns] = append(r.tolerable[ns], key)
			}
		case KeyNodeSelector:
			if !scoped {
				return Rules{}, fmt.Errorf("key %q: a node selector is a namespace's (%s.<namespace>)", k, KeyNodeSelector)
			}
			sel := map[string]string{}
			for _, kv := range list(v) {
				lk, lv, ok := strings.Cut(kv, "=")
				if !ok || len(validation.IsQualifiedName(lk)) > 0 || len(validation.IsValidLabelValue(lv)) > 0 {
					return Rules{}, fmt.Errorf("key %q: %q is not a label (name=value)", k, kv)
				}
				sel[lk] = lv
			}
			if len(sel) > 0 {
				r.selectors[ns] = sel
			}
		default:
			return Rules{}, fmt.Errorf("key %q: unknown; the keys are %s, %s.<namespace> and %s.<namespace>", k, KeyTolerations, KeyTolerations, KeyNodeSelector)
		}
	}
	return r, nil
}

func list(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// Tolerable are the taint keys namespace ns may tolerate.
func (r Rules) Tolerable(ns string) []string {
	return slices.Concat(r.tolerable[""], r.tolerable[ns])
}

// allows says whether namespace ns may use toleration t.
func (r Rules) allows(ns string, t corev1.Toleration) bool {
	keys := r.Tolerable(ns)
	return slices.Contains(keys, AnyTaint) || (t.Key != "" && slices.Contains(keys, t.Key))
}

// Check refuses a crawler of namespace ns whose placement reaches beyond what the
// administrator allows the namespace: a toleration of a taint key it may not tolerate
// (or of every taint), or a node selector that contradicts the namespace's.
func (r Rules) Check(ns string, p *isov1.Placement) error {
	if p == nil {
		return nil
	}
	for i, t := range p.Tolerations {
		if r.allows(ns, t) {
			continue
		}
		what := fmt.Sprintf("tolerates taint key %q", t.Key)
		if t.Key == "" {
			what = "tolerates every taint (no key)"
		}
		return fmt.Errorf("spec.placement.tolerations[%d] %s, and namespace %s may tolerate only %s (the administrator's ConfigMap %s, keys %s and %s.%s): remove it, or have the key allowed to the namespace",
			i, what, ns, keysList(r.Tolerable(ns)), isov1.NodeAccessConfigMap, KeyTolerations, KeyTolerations, ns)
	}
	for _, k := range slices.Sorted(maps.Keys(r.selectors[ns])) {
		want := r.selectors[ns][k]
		if v, ok := p.NodeSelector[k]; ok && v != want {
			return fmt.Errorf("spec.placement.nodeSelector[%s] is %q, and namespace %s's crawlers run only on nodes labelled %s=%s (the administrator's ConfigMap %s, key %s.%s): remove it, or set it to %q",
				k, v, ns, k, want, isov1.NodeAccessConfigMap, KeyNodeSelector, ns, want)
		}
	}
	return nil
}

func keysList(keys []string) string {
	if len(keys) == 0 {
		return "no taint"
	}
	if slices.Contains(keys, AnyTaint) {
		return "every taint"
	}
	keys = slices.Clone(keys)
	sort.Strings(keys)
	return "the taint keys " + strings.Join(keys, ", ")
}

// Apply narrows a placement request of a crawler of namespace ns to the nodes the
// namespace may reach: only the tolerations it may use count, and its node selector
// joins the crawler's. It never widens the request.
func (r Rules) Apply(ns string, req *placement.Request) {
	var tols []corev1.Toleration
	for _, t := range req.Tolerations {
		if r.allows(ns, t) {
			tols = append(tols, t)
		}
	}
	req.Tolerations = tols
	if sel := r.selectors[ns]; len(sel) > 0 {
		merged := maps.Clone(req.NodeSelector)
		if merged == nil {
			merged = map[string]string{}
		}
		for k, v := range sel {
			if have, ok := merged[k]; ok && have != v {
				// Contradicts the namespace's: no node can carry both; Check says why.
				merged[k] = v + "\x00" + have
				continue
			}
			merged[k] = v
		}
		req.NodeSelector = merged
	}
}
