package slo

import (
	"math"
	"testing"
)

func TestBudgetRemaining(t *testing.T) {
	cases := map[string]struct {
		over, intervals int64
		objective       float64
		want            float64
		ok              bool
	}{
		"nothing over: the whole budget left":    {over: 0, intervals: 100_000, objective: 99.999, want: 1, ok: true},
		"half the budget spent":                  {over: 5, intervals: 1_000_000, objective: 99.999, want: 0.5, ok: true},
		"exactly spent":                          {over: 1, intervals: 100_000, objective: 99.999, want: 0, ok: true},
		"overspent ten times":                    {over: 11, intervals: 100_000, objective: 99.999, want: -10, ok: true},
		"a looser objective has a larger budget": {over: 10, intervals: 1_000, objective: 99, want: 0, ok: true},
		"no intervals: nothing to say":           {over: 0, intervals: 0, objective: 99.999},
		"no budget at 100%":                      {over: 0, intervals: 100, objective: 100},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := BudgetRemaining(tc.over, tc.intervals, tc.objective)
			if ok != tc.ok || math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("BudgetRemaining(%d, %d, %g) = %g, %v; want %g, %v", tc.over, tc.intervals, tc.objective, got, ok, tc.want, tc.ok)
			}
		})
	}
}
