package testcases

import (
	"fmt"
	"reflect"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

// Overflow is a duration that matches the API's duration pattern but that Go cannot hold
// (time.Duration ends at 2562047h47m16.854775807s): stored, it would fail to decode in
// every client of the Go types, the manager's and the NIC agents' caches included.
const Overflow = "2562048h"

// FullProfile is a ContentionProfile that the API accepts, with every section present,
// so that a case can set any of its fields.
const FullProfile = `apiVersion: isochron.io/v1alpha1
kind: ContentionProfile
metadata:
  name: full
spec:
  nodeSelector: {}
  crawler:
    cpuPerRequest: 1400us
    overloadPenalty: 200ms
  host:
    ioCostPerRequest: 300us
    schedulerGranularity: 30ms
  nic:
    capacity: 1G
`

// FullCrawlerVM is a CrawlerVM that the API accepts, with every optional section that
// holds a duration present.
const FullCrawlerVM = `apiVersion: isochron.io/v1alpha1
kind: CrawlerVM
metadata:
  name: full
  namespace: default
spec:
  rps: 400
  errorBudget:
    tolerance: 10ms
  guest:
    image: quay.io/org/crawler:1
    memory: 2Gi
  rtNIC:
    networkName: rt-net
    deadline: 5ms
    minBandwidth: 100M
  probe:
    duration: 20m
`

// DurationPaths are the dotted paths, under spec, of every duration (metav1.Duration)
// field of spec, a spec type of package api/v1alpha1, found by walking its Go type: a
// duration field added later is found too. It panics on a duration inside a list or
// map, which the paths cannot name.
func DurationPaths(spec reflect.Type) []string {
	var out []string
	var walk func(t reflect.Type, prefix string, inList bool)
	walk = func(t reflect.Type, prefix string, inList bool) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch {
		case t == reflect.TypeFor[metav1.Duration]():
			if inList {
				panic(fmt.Sprintf("a duration in a list or map at %s: DurationPaths cannot name it", prefix))
			}
			out = append(out, prefix)
			return
		case t.Kind() == reflect.Slice || t.Kind() == reflect.Map:
			walk(t.Elem(), prefix+"[]", true)
			return
		case t.Kind() != reflect.Struct || t.PkgPath() != reflect.TypeFor[isov1.CrawlerVMSpec]().PkgPath():
			return
		}
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" {
				continue
			}
			p := name
			if prefix != "" {
				p = prefix + "." + name
			}
			walk(f.Type, p, inList)
		}
	}
	walk(spec, "", false)
	return out
}

// OverflowingDurations are, for the object full (FullProfile or FullCrawlerVM) of the
// kind whose spec type is spec, one case per duration field of the spec: the field set
// to Overflow, refused with a message that names the field and its bound.
func OverflowingDurations(full string, spec reflect.Type) map[string]Invalid {
	out := map[string]Invalid{}
	for _, p := range DurationPaths(spec) {
		out[p+" "+Overflow] = Invalid{Base: full, Set: map[string]any{p: Overflow}, Field: "spec." + p, Message: "at most"}
	}
	return out
}
