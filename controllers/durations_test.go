package controllers_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/test/support/testcases"
)

// A duration Go cannot hold ("2562048h" overflows time.Duration) in any spec field of a
// ContentionProfile or a CrawlerVM is refused by the API server, with a message naming
// the field and its bound: stored, it would fail to decode in the manager's cache and
// every NIC agent's, and wedge them all. The full objects the cases edit are accepted.
func TestOverflowingDurationsAreRefusedByTheAPIServer(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	for kind, tc := range map[string]struct {
		full       string
		spec       reflect.Type
		namespaced bool
	}{
		"ContentionProfile": {testcases.FullProfile, reflect.TypeFor[isov1.ContentionProfileSpec](), false},
		"CrawlerVM":         {testcases.FullCrawlerVM, reflect.TypeFor[isov1.CrawlerVMSpec](), true},
	} {
		t.Run(kind, func(t *testing.T) {
			object := func(c testcases.Invalid, name string) *unstructured.Unstructured {
				u := &unstructured.Unstructured{Object: c.Object()}
				u.SetName(name)
				if tc.namespaced {
					u.SetNamespace(ns)
				} else {
					u.SetNamespace("")
				}
				return u
			}
			full := object(testcases.Invalid{Base: tc.full}, "overflow-full")
			if err := k8s.Create(ctx, full); err != nil {
				t.Fatalf("the full %s is refused: %v", kind, err)
			}
			t.Cleanup(func() { _ = k8s.Delete(context.Background(), full) })
			cases := testcases.OverflowingDurations(tc.full, tc.spec)
			if len(cases) < 3 {
				t.Fatalf("only %d duration fields found in %s", len(cases), tc.spec)
			}
			i := 0
			for name, c := range cases {
				i++
				t.Run(name, func(t *testing.T) {
					u := object(c, fmt.Sprintf("overflow-%d", i))
					err := k8s.Create(ctx, u)
					if !apierrors.IsInvalid(err) {
						t.Fatalf("create: got %v, want Invalid", err)
					}
					t.Logf("refused: %v", err)
					if !strings.Contains(err.Error(), c.Field) || !strings.Contains(err.Error(), c.Message) {
						t.Errorf("refusal %q does not name %s with %q", err, c.Field, c.Message)
					}
					stored := &unstructured.Unstructured{}
					stored.SetGroupVersionKind(schema.GroupVersionKind{Group: isov1.GroupVersion.Group, Version: isov1.GroupVersion.Version, Kind: kind})
					stored.SetNamespace(u.GetNamespace())
					stored.SetName(u.GetName())
					if get(t, stored) {
						t.Errorf("a refused %s was stored", kind)
					}
				})
			}
		})
	}
}
