package validation

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

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
