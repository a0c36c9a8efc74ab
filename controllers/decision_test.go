package controllers

import (
	"strings"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/inventory"
	"isochron.io/isochron/internal/model"
	"isochron.io/isochron/internal/placement"
	"isochron.io/isochron/internal/sizing"
)

// applyDecision is pure: a decision in, a status and an outcome out.
func TestApplyDecision(t *testing.T) {
	size := sizing.Result{VCPUs: 1, HostCPUs: 2, MemoryBytes: 1 << 30}
	placed := placement.Decision{Node: "rt-1", Sizing: size, Predicted: 1712 * time.Microsecond, Cause: "host-io", Correction: 1}
	unfit := placement.Decision{Sizing: size, Reason: "2 nodes: too few free CPUs"}
	onRT0 := func(c *isov1.CrawlerVM) {
		c.Status.Sizing = inventory.SizingStatus(size)
		c.Status.Placement = &isov1.PlacementStatus{Node: "rt-0"}
		setCondition(c, isov1.ConditionPlaced, true, isov1.ReasonPlaced, "node rt-0 holds ...")
	}
	cases := []struct {
		name      string
		held      func(*isov1.CrawlerVM)
		d         placement.Decision
		wantDone  bool
		wantEvent string // reason, "" for none
		wantNode  string // status.placement.node after
		wantPlace metav1.ConditionStatus
		wantMsg   string
	}{
		{name: "placed, new", d: placed, wantEvent: isov1.ReasonPlaced, wantNode: "rt-1", wantPlace: metav1.ConditionTrue,
			wantMsg: "node rt-1 holds 2 exclusive CPUs (1 vCPUs and the emulator thread); predicted interval error 1.712ms (host-io) within the 10ms tolerance"},
		{name: "placed, same node again: no event", held: func(c *isov1.CrawlerVM) { onRT0(c); c.Status.Placement.Node = "rt-1" }, d: placed,
			wantNode: "rt-1", wantPlace: metav1.ConditionTrue, wantMsg: "node rt-1 holds"},
		{name: "moved to another node", held: onRT0, d: placed, wantEvent: isov1.ReasonPlaced, wantNode: "rt-1", wantPlace: metav1.ConditionTrue, wantMsg: "node rt-1"},
		{name: "nothing fits, nothing held: done, said once", d: unfit, wantDone: true, wantEvent: isov1.ReasonUnschedulable,
			wantPlace: metav1.ConditionFalse, wantMsg: "no node can host 1 vCPUs (2 exclusive CPUs) within every crawler's budget: 2 nodes: too few free CPUs"},
		{name: "nothing fits a new spec: the old reservation stays", held: onRT0, d: unfit, wantEvent: isov1.ReasonUnschedulable,
			wantNode: "rt-0", wantPlace: metav1.ConditionFalse, wantMsg: "the VM of the previous spec keeps its reservation on rt-0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &isov1.CrawlerVM{ObjectMeta: metav1.ObjectMeta{Name: "c", Generation: 3},
				Spec: isov1.CrawlerVMSpec{RPS: 100, ErrorBudget: isov1.ErrorBudget{Tolerance: metav1.Duration{Duration: 10 * time.Millisecond}}}}
			if tc.held != nil {
				tc.held(c)
			}
			out := applyDecision(c, tc.d)
			if out.done != tc.wantDone {
				t.Errorf("done = %v, want %v", out.done, tc.wantDone)
			}
			gotEvent := ""
			if out.event != nil {
				gotEvent = out.event.reason
			}
			if gotEvent != tc.wantEvent {
				t.Errorf("event %q, want %q", gotEvent, tc.wantEvent)
			}
			gotNode := ""
			if c.Status.Placement != nil {
				gotNode = c.Status.Placement.Node
			}
			if gotNode != tc.wantNode {
				t.Errorf("status.placement.node %q, want %q", gotNode, tc.wantNode)
			}
			p := apimeta.FindStatusCondition(c.Status.Conditions, isov1.ConditionPlaced)
			if p == nil || p.Status != tc.wantPlace || !strings.Contains(p.Message, tc.wantMsg) || p.ObservedGeneration != 3 {
				t.Errorf("Placed = %+v, want %s containing %q for generation 3", p, tc.wantPlace, tc.wantMsg)
			}
			if c.Status.ObservedGeneration != 3 {
				t.Errorf("observedGeneration %d", c.Status.ObservedGeneration)
			}
		})
	}
}

// The Placed message and status.placement say the same prediction, also once refreshed
// (make demo showed 3.788ms in one and 3.815ms in the other).
func TestSetPlacementOneSource(t *testing.T) {
	c := &isov1.CrawlerVM{Spec: isov1.CrawlerVMSpec{ErrorBudget: isov1.ErrorBudget{Tolerance: metav1.Duration{Duration: 10 * time.Millisecond}}}}
	size := sizing.Result{VCPUs: 2, HostCPUs: 3}
	setPlacement(c, "rt-0", size, model.Prediction{Error: 3788 * time.Microsecond, Cause: "cpu-contention", Within: true})
	setPlacement(c, "rt-0", size, model.Prediction{Error: 3815400 * time.Nanosecond, Cause: "cpu-contention", Within: true})
	msg := apimeta.FindStatusCondition(c.Status.Conditions, isov1.ConditionPlaced).Message
	if got := c.Status.Placement.PredictedError.Duration; got != 3815*time.Microsecond || !strings.Contains(msg, "3.815ms") || strings.Contains(msg, "3.788") {
		t.Errorf("status.placement %s, Placed %q: want 3.815ms in both", got, msg)
	}
	c.Status.LastRemediation = &isov1.Remediation{Job: "c-probe-1", From: "rt-1", To: "rt-0"}
	setPlacement(c, "rt-0", size, model.Prediction{Error: 12 * time.Millisecond, Cause: "cpu-contention"})
	msg = apimeta.FindStatusCondition(c.Status.Conditions, isov1.ConditionPlaced).Message
	if !strings.HasPrefix(msg, "moved from node rt-1 (probe Job c-probe-1 refuted the SLO there): ") || !strings.Contains(msg, "over the 10ms tolerance") {
		t.Errorf("Placed %q: want the move first and the figure over tolerance", msg)
	}
	if !apimeta.IsStatusConditionTrue(c.Status.Conditions, isov1.ConditionAtRisk) {
		t.Error("AtRisk not True for a prediction over tolerance")
	}
}
