package validation

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/config/crd"
	"isochron.io/isochron/test/support/testcases"
)

func validator(t *testing.T) *Validator {
	t.Helper()
	v, err := New(crd.CrawlerVMs, "v1alpha1")
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestInvalidCrawlerVMsAreRefused(t *testing.T) {
	v := validator(t)
	for name, tc := range testcases.InvalidCrawlerVMs {
		t.Run(name, func(t *testing.T) {
			errs := v.DefaultAndValidate(context.Background(), tc.Object())
			got := errs.ToAggregate()
			if got == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(got.Error(), tc.Field) || !strings.Contains(got.Error(), tc.Message) {
				t.Errorf("refusal %q does not name %s with %q", got.Error(), tc.Field, tc.Message)
			}
		})
	}
}

func TestDefaultsFromTheSchema(t *testing.T) {
	obj := testcases.ValidObject()
	if errs := validator(t).DefaultAndValidate(context.Background(), obj); len(errs) > 0 {
		t.Fatal(errs.ToAggregate())
	}
	want := map[string]any{
		"rps":          int64(400),
		"errorBudget":  map[string]any{"tolerance": "10ms", "objective": "99.999"},
		"guest":        map[string]any{"image": "quay.io/org/crawler:1", "memory": "2Gi"},
		"cpuPlacement": "dedicated",
		"placement":    map[string]any{"policy": "pack", "onRefuted": "Report"},
		"probe":        map[string]any{"duration": "20m", "traffic": "Agent"},
	}
	got := obj["spec"]
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("defaulted spec (-want +got):\n%s", diff)
	}
}

func TestUnknownFieldsAreRefusedNotDropped(t *testing.T) {
	obj := testcases.Invalid{Set: map[string]any{"rpss": 5}}.Object()
	errs := validator(t).DefaultAndValidate(context.Background(), obj)
	if got := errs.ToAggregate(); got == nil || !strings.Contains(got.Error(), "spec.rpss") {
		t.Errorf("unknown field spec.rpss: got %v", got)
	}
}

// Every duration in the spec of a ContentionProfile or a CrawlerVM has an upper bound
// the API server enforces: a duration Go cannot hold (testcases.Overflow) is refused
// with a message naming the field, never stored to fail every client that decodes it.
// The fields are found by walking the Go types, so a new one without a bound fails here.
func TestEveryDurationHasABound(t *testing.T) {
	for kind, tc := range map[string]struct {
		crd  []byte
		full string
		spec reflect.Type
		want []string
	}{
		"ContentionProfile": {crd.ContentionProfiles, testcases.FullProfile, reflect.TypeFor[isov1.ContentionProfileSpec](),
			[]string{"crawler.cpuPerRequest", "crawler.overloadPenalty", "host.ioCostPerRequest", "host.schedulerGranularity"}},
		"CrawlerVM": {crd.CrawlerVMs, testcases.FullCrawlerVM, reflect.TypeFor[isov1.CrawlerVMSpec](),
			[]string{"errorBudget.tolerance", "rtNIC.deadline", "probe.duration"}},
	} {
		t.Run(kind, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, testcases.DurationPaths(tc.spec)); diff != "" {
				t.Errorf("duration fields (-want +got):\n%s", diff)
			}
			v, err := New(tc.crd, "v1alpha1")
			if err != nil {
				t.Fatal(err)
			}
			if errs := v.DefaultAndValidate(context.Background(), testcases.Invalid{Base: tc.full}.Object()); len(errs) > 0 {
				t.Fatalf("the full %s is refused: %v", kind, errs.ToAggregate())
			}
			for name, c := range testcases.OverflowingDurations(tc.full, tc.spec) {
				t.Run(name, func(t *testing.T) {
					got := v.DefaultAndValidate(context.Background(), c.Object()).ToAggregate()
					if got == nil {
						t.Fatal("accepted")
					}
					if !strings.Contains(got.Error(), c.Field) || !strings.Contains(got.Error(), c.Message) {
						t.Errorf("refusal %q does not name %s with %q", got.Error(), c.Field, c.Message)
					}
					t.Log(got)
				})
			}
		})
	}
}
