package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	kubevirtv1 "kubevirt.io/api/core/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/version"
)

// runArgs runs the plugin with args and returns its exit status and outputs.
func runArgs(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	return code, out.String(), errOut.String()
}

// Usage errors exit 2 with a line that says what to do, before anything is read (no
// kubeconfig is needed to refuse them).
func TestUsage(t *testing.T) {
	tests := map[string]struct {
		args []string
		want string
	}{
		"status without a name":  {args: []string{"status"}, want: "need the name of one CrawlerVM, got 0 arguments"},
		"status with two names":  {args: []string{"status", "a", "b"}, want: "need the name of one CrawlerVM, got 2 arguments"},
		"status -o wide":         {args: []string{"status", "a", "-o", "wide"}, want: "-o wide: the output format is yaml or json"},
		"probe without a name":   {args: []string{"probe"}, want: "need the name of one CrawlerVM"},
		"plan without -f":        {args: []string{"plan"}, want: "plan needs -f FILE"},
		"plan -o yaml":           {args: []string{"plan", "-f", "x.yaml", "-o", "yaml"}, want: "-o yaml: plan's output format is table or json"},
		"an unknown flag":        {args: []string{"status", "a", "--bogus"}, want: "unknown flag: --bogus"},
		"version takes no names": {args: []string{"version", "a"}, want: `kubectl isochron version takes no arguments`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			code, _, errOut := runArgs(tc.args...)
			if code != exitInvalid || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, errOut, exitInvalid, tc.want)
			}
		})
	}
}

// setVersion sets the build's version for the test, as make's -ldflags -X
// isochron.io/isochron/internal/version.Version=... does.
func setVersion(t *testing.T, v string) {
	t.Helper()
	before := version.Version
	version.Version = v
	t.Cleanup(func() { version.Version = before })
}

// The plugin reports the version internal/version holds, as the manager does; it says so
// before it reaches for the cluster, so even without one.
func TestVersionIsTheBuilds(t *testing.T) {
	setVersion(t, "v0.3.1-g0c0f4edab428")
	code, out, errOut := runArgs("version", "--kubeconfig", filepath.Join(t.TempDir(), "none"))
	if first, _, _ := strings.Cut(out, "\n"); first != "kubectl-isochron: v0.3.1-g0c0f4edab428" {
		t.Errorf("exit %d, stdout %q, stderr %q; want it to start with the build's version", code, out, errOut)
	}
}

func TestCompletionScripts(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		code, out, errOut := runArgs("completion", shell)
		if code != exitOK || !strings.Contains(out, "kubectl-isochron") {
			t.Errorf("completion %s: exit %d, stderr %q, script of %d bytes without the command's name", shell, code, errOut, len(out))
		}
	}
}

func TestMigrationFor(t *testing.T) {
	crawler := func(o func(*isov1.CrawlerVM)) *isov1.CrawlerVM {
		c := &isov1.CrawlerVM{ObjectMeta: metav1.ObjectMeta{Namespace: "bms", Name: "tower-a"}, Status: isov1.CrawlerVMStatus{
			Placement: &isov1.PlacementStatus{Node: "rt-1"}, VMI: &isov1.VMIStatus{Name: "tower-a", Phase: string(kubevirtv1.Running)}}}
		if o != nil {
			o(c)
		}
		return c
	}
	tests := map[string]struct {
		cvm  *isov1.CrawlerVM
		to   string
		want string // the error, "" for a migration
	}{
		"running: virtctl migrate's request": {cvm: crawler(nil)},
		"--to another node":                  {cvm: crawler(nil), to: "rt-2"},
		"--to its own node":                  {cvm: crawler(nil), to: "rt-1", want: "runs on node rt-1 already"},
		"not placed":                         {cvm: crawler(func(c *isov1.CrawlerVM) { c.Status.Placement = nil }), want: "holds no node, nothing to move"},
		"moving": {cvm: crawler(func(c *isov1.CrawlerVM) { c.Status.Move = &isov1.Move{From: "rt-1", To: "rt-2"} }),
			want: "is moving already, from node rt-1 to node rt-2"},
		"VMI not running": {cvm: crawler(func(c *isov1.CrawlerVM) { c.Status.VMI.Phase = string(kubevirtv1.Scheduling) }), want: "has no running VMI"},
		"no VMI":          {cvm: crawler(func(c *isov1.CrawlerVM) { c.Status.VMI = nil }), want: "has no running VMI"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			mig, err := migrationFor(tc.cvm, tc.to)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err = %v, want %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// No isochron label (the manager's own migrations carry it), and a target
			// only when asked for one.
			if mig.Namespace != "bms" || mig.Spec.VMIName != "tower-a" || len(mig.Labels) != 0 || mig.GenerateName == "" {
				t.Errorf("migration %+v", mig)
			}
			var want map[string]string
			if tc.to != "" {
				want = map[string]string{corev1.LabelHostname: tc.to}
			}
			if diff := cmp.Diff(want, mig.Spec.AddedNodeSelector); diff != "" {
				t.Errorf("addedNodeSelector (-want +got):\n%s", diff)
			}
		})
	}
}

func TestManagerVersion(t *testing.T) {
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: managerNamespace, Name: managerDeployment}}
	dep.Spec.Template.Spec.Containers = []corev1.Container{{Name: "kube-rbac-proxy", Image: "proxy:v1"}, {Name: managerContainer, Image: "isochron/manager:v0.3.0"}}
	if got := managerVersion(dep); got != "v0.3.0" {
		t.Errorf("managerVersion = %q, want v0.3.0", got)
	}
	dep.Spec.Template.Spec.Containers = dep.Spec.Template.Spec.Containers[:1]
	if got := managerVersion(dep); !strings.HasPrefix(got, "unknown") {
		t.Errorf("managerVersion without the manager container = %q, want unknown", got)
	}
}

func TestProbeRequest(t *testing.T) {
	got, err := probeRequest(time.Date(2026, 11, 22, 4, 5, 6, 700, time.FixedZone("CET", 3600)))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(`{"metadata":{"annotations":{"isochron.io/probe-requested":"2026-11-22T03:05:06Z"}}}`, string(got)); diff != "" {
		t.Errorf("patch (-want +got):\n%s", diff)
	}
}

func TestCompletions(t *testing.T) {
	cs := []isov1.CrawlerVM{{ObjectMeta: metav1.ObjectMeta{Name: "tower-a"}}, {ObjectMeta: metav1.ObjectMeta{Name: "tower-b"}}, {ObjectMeta: metav1.ObjectMeta{Name: "gate"}}}
	for prefix, want := range map[string][]string{"": {"tower-a", "tower-b", "gate"}, "tow": {"tower-a", "tower-b"}, "x": nil} {
		if diff := cmp.Diff(want, completions(cs, prefix)); diff != "" {
			t.Errorf("completions(%q) (-want +got):\n%s", prefix, diff)
		}
	}
}
