//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/render"
)

// release is one release as make docker-push build-installer helm-chart writes it: a
// directory with install.yaml, digests.txt and chart/isochron.
type release struct {
	dir, version string
	// images are the release's images by name (manager, nic-agent, rtprobe):
	// REGISTRY/NAME:VERSION@DIGEST, as pushed.
	images map[string]string
}

// loadRelease reads the release in the directory the environment variable key names.
func loadRelease(t *testing.T, key string) release {
	t.Helper()
	dir := os.Getenv(key)
	if dir == "" {
		t.Skipf("%s is not set: no release to install (make e2e-local pushes two to the local cluster's registry: make e2e-local-release)", key)
	}
	data, err := os.ReadFile(filepath.Join(dir, "digests.txt"))
	if err != nil {
		t.Fatalf("%s: %v (make e2e-local-release writes it)", key, err)
	}
	r := release{dir: dir, images: map[string]string{}}
	for _, ref := range strings.Fields(string(data)) {
		repoTag, _, _ := strings.Cut(ref, "@")
		slash, colon := strings.LastIndex(repoTag, "/"), strings.LastIndex(repoTag, ":")
		if slash < 0 || colon < slash {
			t.Fatalf("%s/digests.txt: %q is not REGISTRY/NAME:VERSION@DIGEST", dir, ref)
		}
		r.images[repoTag[slash+1:colon]] = ref
		r.version = repoTag[colon+1:]
	}
	for _, n := range []string{"manager", "nic-agent", "rtprobe"} {
		if r.images[n] == "" {
			t.Fatalf("%s/digests.txt has no image %s: %v", dir, n, r.images)
		}
	}
	return r
}

// digest is the sha256:... of ref.
func digest(ref string) string { _, d, _ := strings.Cut(ref, "@"); return d }

// command runs a user's command line (kubectl, helm) against the cluster of KUBECONFIG
// and fails t with its output if it fails.
func command(t *testing.T, name string, args ...string) string {
	t.Helper()
	t.Logf("$ %s %s", filepath.Base(name), strings.Join(args, " "))
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// A platform engineer's whole path with isochron's releases, each pulled by the node from
// the registry it was pushed to (make e2e-local-release: this build, and a rebuild of it
// that reports another version): install.yaml installs isochron and a crawler runs;
// applying the next release's install.yaml upgrades it without restarting the crawler's
// VM; deleting it (the API and settings kept) leaves the VM running; the first release's
// Helm chart installs isochron again, taking over what the kubectl install kept, and
// adopts the VM without a restart; helm upgrade to the next release's chart restarts it
// neither; helm uninstall leaves it running too. At every step
// the crawler's VMI keeps its UID, gets no outage and no RestartRequired, and the
// operator that runs is the release's build, from its image's digest.
func TestReleaseInstallsUpgradesAndUninstallsFromTheRegistry(t *testing.T) {
	from, to := loadRelease(t, "E2E_RELEASE"), loadRelease(t, "E2E_RELEASE_UPGRADE")
	helm := os.Getenv("E2E_HELM")
	if helm == "" {
		t.Skip("E2E_HELM is not set: no helm to install the chart with (make e2e-local sets it)")
	}
	ctx := context.Background()
	// The suite's own install goes; the releases replace it, and it comes back after.
	undeployKeepingCrawlers(ctx, t)
	uninstallRelease := []string{"delete", "-l", "app.kubernetes.io/component notin (api,settings)", "--ignore-not-found", "--wait", "--timeout=5m"}
	t.Cleanup(func() {
		if t.Failed() {
			saveArtifacts(t.Name()+"-operator", "")
		}
		for _, r := range []release{from, to} {
			_ = exec.Command(kubectl, append(uninstallRelease, "-f", filepath.Join(r.dir, "install.yaml"))...).Run()
		}
		_ = exec.Command(helm, "uninstall", "isochron", "--namespace", "default", "--ignore-not-found", "--wait").Run()
		if err := deploy(context.Background()); err != nil {
			t.Errorf("installing isochron again for the tests after: %v", err)
		}
	})

	// Install. The suite's install kept its API and settings under its own field manager
	// (a cluster installed with make deploy or an earlier install.yaml has them under
	// kubectl's, and needs no --force-conflicts).
	waitNamespacesGone(ctx, t)
	command(t, kubectl, "apply", "--server-side", "--force-conflicts", "-k", withFlags(t, from))
	waitForRelease(ctx, t, from)
	ns := testNamespace(t)
	cvm, vmi := runningShared(ctx, t, ns, "released")
	agentDisk := ""
	for _, v := range vmi.Spec.Volumes {
		if v.Name == render.VolumeAgent && v.ContainerDisk != nil {
			agentDisk = v.ContainerDisk.Image
		}
	}
	if agentDisk != from.images["rtprobe"] {
		t.Errorf("the crawler's agent disk is %q, want the release's rtprobe image %s", agentDisk, from.images["rtprobe"])
	}
	kept := crawlerState(ctx, t, cvm, vmi)

	// Upgrade.
	began := time.Now()
	command(t, kubectl, "apply", "--server-side", "-k", withFlags(t, to))
	waitForRelease(ctx, t, to)
	t.Logf("upgraded from %s to %s in %s", from.version, to.version, time.Since(began).Round(time.Second))
	kept.judgedAgain(ctx, t, "after the upgrade", 25*time.Second)
	kept.check(ctx, t, "after the upgrade")
	if err := cl.Get(ctx, client.ObjectKeyFromObject(vmi), vmi); err != nil {
		t.Fatal(err)
	}
	for _, v := range vmi.Spec.Volumes {
		if v.Name == render.VolumeAgent && v.ContainerDisk != nil && v.ContainerDisk.Image != agentDisk {
			t.Errorf("the running VMI's agent disk is %s after the upgrade, want %s until its next start", v.ContainerDisk.Image, agentDisk)
		}
	}

	// Uninstall: the release's objects but its API and the administrator's settings.
	command(t, kubectl, append(uninstallRelease, "-f", filepath.Join(to.dir, "install.yaml"))...)
	waitOperatorGone(ctx, t)
	kept.check(ctx, t, "after the uninstall")

	// Install again, with the chart of the first release (a rollback): Helm takes over
	// what the kubectl install kept.
	waitNamespacesGone(ctx, t)
	command(t, helm, "install", "isochron", filepath.Join(from.dir, "chart", "isochron"), "--namespace", "default", "--take-ownership",
		"--set-json", "manager.extraArgs="+jsonList(managerFlags()))
	waitForRelease(ctx, t, from)
	kept.judgedAgain(ctx, t, "under the chart", 20*time.Second)
	kept.check(ctx, t, "after the chart's install")

	// Upgrade the chart as docs/operations.md says: the new CRDs first (Helm never
	// changes crds/), then helm upgrade with the values set before.
	command(t, kubectl, "apply", "--server-side", "--force-conflicts", "-f", filepath.Join(to.dir, "chart", "isochron", "crds"))
	command(t, helm, "upgrade", "isochron", filepath.Join(to.dir, "chart", "isochron"), "--namespace", "default", "--reset-then-reuse-values")
	waitForRelease(ctx, t, to)
	kept.judgedAgain(ctx, t, "after helm upgrade", 30*time.Second)
	kept.check(ctx, t, "after helm upgrade")

	// Uninstall the chart.
	command(t, helm, "uninstall", "isochron", "--namespace", "default", "--wait")
	waitOperatorGone(ctx, t)
	kept.check(ctx, t, "after helm uninstall")
}

// managerFlags are the flags this cluster's manager needs besides a release's: the
// suite's --probe-cpu (a probe pod on the local node cannot have a whole CPU).
func managerFlags() []string {
	if probeCPU == "" {
		return nil
	}
	return []string{"--probe-cpu=" + probeCPU}
}

func jsonList(items []string) string {
	out, err := json.Marshal(append([]string{}, items...))
	if err != nil {
		panic(err)
	}
	return string(out)
}

// withFlags returns a kustomization of r's install.yaml that adds managerFlags to the
// manager's arguments, as a platform engineer sets the manager's flags with a release's
// install.yaml (docs/operations.md, "From a release").
func withFlags(t *testing.T, r release) string {
	t.Helper()
	dir := t.TempDir()
	install, err := os.ReadFile(filepath.Join(r.dir, "install.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	kustomization := "resources:\n- install.yaml\n"
	if flags := managerFlags(); len(flags) > 0 {
		kustomization += "patches:\n- target: {kind: Deployment, name: " + operatorDep + "}\n  patch: |-\n"
		for _, f := range flags {
			kustomization += "    - {op: add, path: /spec/template/spec/containers/0/args/-, value: " + strconv.Quote(f) + "}\n"
		}
	}
	for name, data := range map[string][]byte{"install.yaml": install, "kustomization.yaml": []byte(kustomization)} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// waitForRelease waits until the manager and every NIC agent run r's images, pulled by
// their digests, and the manager that leads logged r's version.
func waitForRelease(ctx context.Context, t *testing.T, r release) {
	t.Helper()
	waitFor(t, runTimeout, fmt.Sprintf("isochron %s rolled out from %s", r.version, r.images["manager"]), func() (bool, string, error) {
		dep := &appsv1.Deployment{}
		if err := cl.Get(ctx, client.ObjectKey{Namespace: operatorNS, Name: operatorDep}, dep); err != nil {
			return false, err.Error(), client.IgnoreNotFound(err)
		}
		ds := &appsv1.DaemonSet{}
		if err := cl.Get(ctx, client.ObjectKey{Namespace: nicAgentNS, Name: nicAgentDS}, ds); err != nil {
			return false, err.Error(), client.IgnoreNotFound(err)
		}
		want := ptr.Deref(dep.Spec.Replicas, 1) // a Deployment's default
		s, d := dep.Status, ds.Status
		if s.ObservedGeneration != dep.Generation || s.UpdatedReplicas != want || s.AvailableReplicas != want || s.Replicas != want ||
			d.ObservedGeneration != ds.Generation || d.DesiredNumberScheduled == 0 || d.UpdatedNumberScheduled != d.DesiredNumberScheduled || d.NumberAvailable != d.DesiredNumberScheduled {
			return false, fmt.Sprintf("manager: %d of %d updated, %d available, %d in all; NIC agents: %d of %d updated, %d available",
				s.UpdatedReplicas, want, s.AvailableReplicas, s.Replicas, d.UpdatedNumberScheduled, d.DesiredNumberScheduled, d.NumberAvailable), nil
		}
		for ns, image := range map[string]string{operatorNS: r.images["manager"], nicAgentNS: r.images["nic-agent"]} {
			pods := &corev1.PodList{}
			if err := cl.List(ctx, pods, client.InNamespace(ns)); err != nil {
				return false, "", err
			}
			// The image the pod names, and the one the kubelet pulled: its imageID is
			// REGISTRY/NAME@DIGEST, the index it resolved in the registry.
			repoTag, _, _ := strings.Cut(image, "@")
			repo := repoTag[:strings.LastIndex(repoTag, ":")]
			for _, p := range pods.Items {
				for _, c := range p.Spec.Containers {
					if c.Image != image {
						return false, fmt.Sprintf("pod %s/%s container %s: image %s, want %s", ns, p.Name, c.Name, c.Image, image), nil
					}
				}
				for _, c := range p.Status.ContainerStatuses {
					if c.ImageID != repo+"@"+digest(image) || !c.Ready {
						return false, fmt.Sprintf("pod %s/%s container %s: pulled %q, ready %t; want %s@%s", ns, p.Name, c.Name, c.ImageID, c.Ready, repo, digest(image)), nil
					}
				}
			}
		}
		return true, "", nil
	})
	waitFor(t, runTimeout, fmt.Sprintf("the manager's log naming version %s", r.version), func() (bool, string, error) {
		out, err := exec.Command(kubectl, "logs", "-n", operatorNS, "deployment/"+operatorDep, "--tail=-1").CombinedOutput()
		if err != nil {
			return false, fmt.Sprintf("kubectl logs: %v: %s", err, out), nil
		}
		return strings.Contains(string(out), `"version":"`+r.version+`"`), "no start line with that version yet", nil
	})
}

// keptCrawler is what must not change of a running crawler while isochron is upgraded,
// removed and installed again.
type keptCrawler struct {
	cvm     *isov1.CrawlerVM
	vmi     client.ObjectKey
	uid     string
	outages int
}

func crawlerState(ctx context.Context, t *testing.T, cvm *isov1.CrawlerVM, vmi *kubevirtv1.VirtualMachineInstance) keptCrawler {
	t.Helper()
	if err := cl.Get(ctx, client.ObjectKeyFromObject(cvm), cvm); err != nil {
		t.Fatal(err)
	}
	return keptCrawler{cvm: cvm, vmi: client.ObjectKeyFromObject(vmi), uid: string(vmi.UID), outages: len(cvm.Status.Outages)}
}

// check fails t unless the crawler's VMI is the same one, running, with no new outage
// and no RestartRequired on its VM.
func (k keptCrawler) check(ctx context.Context, t *testing.T, when string) {
	t.Helper()
	vmi := &kubevirtv1.VirtualMachineInstance{}
	if err := cl.Get(ctx, k.vmi, vmi); err != nil || string(vmi.UID) != k.uid || vmi.Status.Phase != kubevirtv1.Running {
		t.Fatalf("VMI %s %s: %v, uid %s (was %s), phase %s: want the same VMI running", k.vmi, when, err, vmi.UID, k.uid, vmi.Status.Phase)
	}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(k.cvm), k.cvm); err != nil {
		t.Fatal(err)
	}
	if len(k.cvm.Status.Outages) != k.outages {
		t.Errorf("outages %s %+v: want the %d before, none new", when, k.cvm.Status.Outages, k.outages)
	}
	vm := &kubevirtv1.VirtualMachine{}
	if err := cl.Get(ctx, k.vmi, vm); err != nil {
		t.Fatal(err)
	}
	for _, c := range vm.Status.Conditions {
		if c.Type == kubevirtv1.VirtualMachineRestartRequired && c.Status == corev1.ConditionTrue {
			t.Errorf("the VM asks for a restart %s: %+v", when, c)
		}
	}
}

// judgedAgain changes the crawler's spec where it is no input of the VM (how long a
// probe lasts) and waits for a Ready verdict on that generation: the operator that runs
// now has read the crawler.
func (k keptCrawler) judgedAgain(ctx context.Context, t *testing.T, when string, probe time.Duration) {
	t.Helper()
	if err := cl.Get(ctx, client.ObjectKeyFromObject(k.cvm), k.cvm); err != nil {
		t.Fatal(err)
	}
	changed := k.cvm.DeepCopy()
	changed.Spec.Probe = &isov1.Probe{Duration: &metav1.Duration{Duration: probe}}
	if err := cl.Patch(ctx, changed, client.MergeFrom(k.cvm)); err != nil {
		t.Fatalf("changing the crawler's probe duration %s: %v", when, err)
	}
	generation := changed.Generation
	waitFor(t, runTimeout, fmt.Sprintf("the crawler Ready for generation %d %s", generation, when), func() (bool, string, error) {
		r := condition(ctx, t, k.cvm, isov1.ConditionReady)
		if r == nil {
			return false, "no Ready", nil
		}
		return r.Status == metav1.ConditionTrue && r.ObservedGeneration == generation, fmt.Sprintf("generation %d: %s: %s", r.ObservedGeneration, r.Reason, r.Message), nil
	})
}
