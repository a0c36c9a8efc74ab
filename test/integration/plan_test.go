package integration

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/cli"
	"isochron.io/isochron/test/support/scale"
)

// isochronctl plan, given the cluster's Nodes and CrawlerVMs as kubectl prints them,
// prints what the operator decided: each crawler's node, size and predicted error (the
// prediction the operator keeps refreshed in status.placement, with every neighbour in
// place, which is the one plan prints).
func TestPlanIsWhatTheOperatorDecides(t *testing.T) {
	ns := namespace(t, "plan")
	nodes := registerNodes(t, "pl", 6, 32)
	// plan decides in namespace/name order; the operator in the order crawlers arrive
	// (within a batch, oldest first, then by name). Applied one after another in name
	// order, each decided before the next arrives, they must decide the same.
	objs := scale.Mix(ns, "pl", 60, 3)
	stop := replica(t, "plan", 4)
	defer stop()
	for i, o := range objs {
		if err := env.Client.Create(context.Background(), o); err != nil {
			t.Fatal(err)
		}
		waitDecided(t, ns, i+1, time.Minute)
	}
	_, _, list := decided(t, ns)

	// The input isochronctl plan reads: kubectl get nodes,crawlervms -o yaml.
	var in bytes.Buffer
	for _, n := range nodes {
		n := n.DeepCopy()
		n.APIVersion, n.Kind = "v1", "Node"
		writeYAML(t, &in, n)
	}
	for i := range list.Items {
		c := list.Items[i].DeepCopy()
		c.APIVersion, c.Kind = isov1.GroupVersion.String(), "CrawlerVM"
		writeYAML(t, &in, c)
	}
	file := filepath.Join(t.TempDir(), "cluster.yaml")
	if err := os.WriteFile(file, in.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	inv, err := cli.Load(context.Background(), []string{file}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := cli.CheckPlanInput(inv); err != nil {
		t.Fatal(err)
	}
	plan := cli.Plan(inv)
	// The operator refreshes its crawlers' predictions as neighbours arrive: wait for the
	// last refresh, then every figure must be plan's.
	deadline := time.Now().Add(time.Minute)
	for {
		diffs := planDiffs(t, ns, plan)
		if len(diffs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			for _, d := range diffs {
				t.Error(d)
			}
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	placed := 0
	for _, c := range plan.Crawlers {
		if c.Placed {
			placed++
		}
	}
	if placed == 0 || placed == len(plan.Crawlers) {
		t.Errorf("%d of %d placed: the case should place some and leave some out", placed, len(plan.Crawlers))
	}
}

// planDiffs compares each crawler of ns as the operator decided it with plan.
func planDiffs(t *testing.T, ns string, plan cli.Result) []string {
	t.Helper()
	list := &isov1.CrawlerVMList{}
	if err := env.Client.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	got := map[string]*isov1.CrawlerVM{}
	for i := range list.Items {
		got[list.Items[i].Name] = &list.Items[i]
	}
	var diffs []string
	for _, want := range plan.Crawlers {
		c := got[want.Name]
		node, predicted := "", 0.0
		if p := c.Status.Placement; p != nil {
			node = p.Node
			if p.PredictedError != nil {
				predicted = math.Round(float64(p.PredictedError.Duration)/float64(time.Millisecond)*1000) / 1000
			}
		}
		var vcpus, hostCPUs int32
		if s := c.Status.Sizing; s != nil {
			vcpus, hostCPUs = s.VCPUs, s.HostCPUs
		}
		if node != want.Node || predicted != want.PredictedErrorMs || (want.Placed && (vcpus != want.VCPUs || hostCPUs != want.HostCPUs)) {
			diffs = append(diffs, fmt.Sprintf("%s: the operator has node %q, %.3f ms, %d/%d CPUs; plan %q, %.3f ms, %d/%d CPUs",
				want.Name, node, predicted, vcpus, hostCPUs, want.Node, want.PredictedErrorMs, want.VCPUs, want.HostCPUs))
		}
	}
	return diffs
}

func writeYAML(t *testing.T, w *bytes.Buffer, obj any) {
	t.Helper()
	b, err := yaml.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	w.WriteString("---\n")
	w.Write(b)
}
