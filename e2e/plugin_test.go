//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/cli"
)

// kubectlPlugin is kubectl-isochron as make e2e builds it; unset, the plugin's checks
// are skipped.
var kubectlPlugin = os.Getenv("E2E_KUBECTL_ISOCHRON")

// noSuchNode is a node name no cluster of the suite has: a move there is one the model
// must refuse, on one node as on many.
const noSuchNode = "e2e-no-such-node"

// checkPlugin runs kubectl isochron against the running crawler cvm as a user does,
// through kubectl (which finds the plugin on PATH) with the suite's kubeconfig: version
// names the manager's build; status says where the crawler runs, and -o json is the
// CrawlerVM; plan places a new crawler beside it and writes nothing; probe starts a probe
// with trigger Requested that the manager judges; move refuses the node the crawler runs
// on itself, and a move to a node that cannot hold it is refused by the manager with the
// model's reason (an Event) while the crawler runs on, its VMI the same.
func checkPlugin(ctx context.Context, t *testing.T, cvm *isov1.CrawlerVM, vmi *kubevirtv1.VirtualMachineInstance) {
	t.Helper()
	if kubectlPlugin == "" {
		t.Log("E2E_KUBECTL_ISOCHRON is not set (make e2e builds kubectl-isochron and sets it): kubectl isochron not checked")
		return
	}
	ns, name, node := cvm.Namespace, cvm.Name, vmi.Status.NodeName

	out := plugin(t, 0, "version")
	if want := "manager: " + cli.ImageTag(managerImage); !strings.Contains(out, want+"\n") || !strings.HasPrefix(out, "kubectl-isochron: ") {
		t.Errorf("kubectl isochron version said %q, want the plugin's version and %q", out, want)
	}

	out = plugin(t, 0, "status", name, "-n", ns)
	for _, want := range []string{
		fmt.Sprintf("CrawlerVM %s/%s:", ns, name),
		fmt.Sprintf("%s (VMI %s Running)", node, vmi.Name),
		"Measured:", "To do:",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl isochron status %s said\n%s\nwant %q in it", name, out, want)
		}
	}
	got := &isov1.CrawlerVM{}
	if err := json.Unmarshal([]byte(plugin(t, 0, "status", name, "-n", ns, "-o", "json")), got); err != nil {
		t.Errorf("kubectl isochron status -o json: %v", err)
	} else if got.Name != name || got.Kind != "CrawlerVM" || got.Status.Placement == nil || got.Status.Placement.Node != node {
		t.Errorf("kubectl isochron status -o json gave %s %s/%s placed %+v, want CrawlerVM %s/%s on %s", got.Kind, got.Namespace, got.Name, got.Status.Placement, ns, name, node)
	}

	checkPluginPlan(ctx, t, cvm)

	// probe: the manager starts a probe for the request and records its verdict.
	asked := time.Now().Add(-time.Second)
	plugin(t, 0, "probe", name, "-n", ns)
	waitFor(t, probeTimeout, "a probe with trigger Requested judged", func() (bool, string, error) {
		c := &isov1.CrawlerVM{}
		if err := cl.Get(ctx, client.ObjectKeyFromObject(cvm), c); err != nil {
			return false, "", err
		}
		lp := c.Status.LastProbe
		return lp != nil && lp.Trigger == isov1.TriggerRequested && !lp.StartTime.Time.Before(asked) && lp.Verdict != "",
			fmt.Sprintf("lastProbe %+v, activeProbe %+v", lp, c.Status.ActiveProbe), nil
	})

	// move: the node it runs on is refused by the plugin; a node that cannot hold it, by
	// the manager with the model's reason.
	if out := plugin(t, 2, "move", name, "-n", ns, "--to", node); !strings.Contains(out, "runs on node "+node+" already") {
		t.Errorf("kubectl isochron move --to %s (its own node) said %q, want that it runs there already", node, out)
	}
	out = plugin(t, 0, "move", name, "-n", ns, "--to", noSuchNode)
	m := regexp.MustCompile(`\(VirtualMachineInstanceMigration (\S+)\)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("kubectl isochron move --to %s said %q, want the migration it created", noSuchNode, out)
	}
	mig := m[1]
	var refused corev1.Event
	waitFor(t, placeTimeout, "the manager refuses migration "+mig+" with an Event and deletes it", func() (bool, string, error) {
		events := &corev1.EventList{}
		if err := cl.List(ctx, events, client.InNamespace(ns), client.MatchingFields{
			"involvedObject.name": name, "reason": isov1.EventReasonMigrationRefused,
		}); err != nil {
			return false, "", err
		}
		found := false
		for _, e := range events.Items {
			if strings.Contains(e.Message, "migration "+mig+" ") {
				refused, found = e, true
			}
		}
		err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: mig}, &kubevirtv1.VirtualMachineInstanceMigration{})
		if err != nil && !apierrors.IsNotFound(err) {
			return false, "", err
		}
		return found && err != nil, fmt.Sprintf("%d MigrationRefused Events, migration gone: %v", len(events.Items), err != nil), nil
	})
	t.Logf("the manager: %s", refused.Message)
	for _, want := range []string{"no other node it asks for can hold the crawler", "not the node the move asks for (kubernetes.io/hostname=" + noSuchNode + ")"} {
		if !strings.Contains(refused.Message, want) {
			t.Errorf("MigrationRefused says %q, want %q in it", refused.Message, want)
		}
	}
	now := &kubevirtv1.VirtualMachineInstance{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(vmi), now); err != nil {
		t.Fatalf("VMI %s after the refused move: %v", vmi.Name, err)
	}
	c := &isov1.CrawlerVM{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(cvm), c); err != nil {
		t.Fatalf("CrawlerVM %s after the refused move: %v", name, err)
	}
	if now.UID != vmi.UID || now.Status.Phase != kubevirtv1.Running || now.Status.NodeName != node || c.Status.Move != nil || c.Status.Placement.Node != node {
		t.Errorf("after the refused move: VMI UID %s (was %s) %s on %s, crawler moving %+v placed on %s; want the same VMI running on %s, no move",
			now.UID, vmi.UID, now.Status.Phase, now.Status.NodeName, c.Status.Move, c.Status.Placement.Node, node)
	}
}

// checkPluginPlan asks kubectl isochron plan where a copy of cvm under another name would
// go: placed on a node of the cluster, and nothing created.
func checkPluginPlan(ctx context.Context, t *testing.T, cvm *isov1.CrawlerVM) {
	t.Helper()
	c := crawler(cvm.Namespace, cvm.Name+"-plan")
	c.Spec = *cvm.Spec.DeepCopy()
	c.SetGroupVersionKind(isov1.GroupVersion.WithKind("CrawlerVM"))
	data, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "crawler.yaml")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	var plan cli.Result
	if err := json.Unmarshal([]byte(plugin(t, 0, "plan", "-f", file, "-n", cvm.Namespace, "-o", "json")), &plan); err != nil {
		t.Fatalf("kubectl isochron plan -o json: %v", err)
	}
	var placed *cli.CrawlerPlan
	for i, p := range plan.Crawlers {
		if p.Namespace == c.Namespace && p.Name == c.Name {
			placed = &plan.Crawlers[i]
		}
	}
	node := &corev1.Node{}
	switch {
	case placed == nil:
		t.Errorf("kubectl isochron plan: no plan for %s/%s in %+v", c.Namespace, c.Name, plan.Crawlers)
	case !placed.Placed || placed.Node == "":
		t.Errorf("kubectl isochron plan: %s not placed (%s), want it beside %s", c.Name, placed.Reason, cvm.Name)
	default:
		if err := cl.Get(ctx, client.ObjectKey{Name: placed.Node}, node); err != nil {
			t.Errorf("kubectl isochron plan placed %s on node %s: %v", c.Name, placed.Node, err)
		}
		t.Logf("kubectl isochron plan: %s on %s, predicted %.2f ms of %.0f ms", c.Name, placed.Node, placed.PredictedErrorMs, placed.ToleranceMs)
	}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(c), &isov1.CrawlerVM{}); !apierrors.IsNotFound(err) {
		t.Errorf("CrawlerVM %s after kubectl isochron plan: %v, want none (a plan writes nothing)", c.Name, err)
	}
}

// plugin runs kubectl isochron ARGS, kubectl finding kubectl-isochron on PATH, and fails
// t unless it exits with status want; it returns what it wrote (stdout and stderr).
func plugin(t *testing.T, want int, args ...string) string {
	t.Helper()
	t.Logf("$ kubectl isochron %s", strings.Join(args, " "))
	cmd := exec.Command(kubectl, append([]string{"isochron"}, args...)...)
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(kubectlPlugin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	status := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		status = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("kubectl isochron %s: %v", strings.Join(args, " "), err)
	}
	if status != want {
		t.Fatalf("kubectl isochron %s exited %d, want %d:\n%s", strings.Join(args, " "), status, want, out)
	}
	return string(out)
}
