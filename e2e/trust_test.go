//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

// lookAlikeWatch is how long the look-alike's thread is watched: past the vCPU guard's
// grace (30 s) and two of its looks (every 10 s), with room for the agent's cache.
const lookAlikeWatch = 75 * time.Second

// TestNICAgentTrustsNoLookAlike plays an unprivileged tenant on an RT node against the
// root NIC agent, on the node VMs:
//
//   - a pod that names a process as a dedicated crawler's QEMU (argv[0] "qemu-...",
//     "-name guest=<namespace>_<crawler>") and a thread as its vCPU ("CPU 0/KVM") gets no
//     realtime thread: the crawler is placed on that node and its launcher cannot start
//     (its guest image does not exist), so the look-alike is the only process of that
//     name there, as it is before a crawler starts or after it stops;
//   - a NetworkAttachmentDefinition that names the node's primary NIC as its RT uplink
//     changes nothing on it: the crawler that uses it is refused (RTUplinkNotAllowed),
//     the agent says why on it, and the NIC's root qdisc stays the kernel's.
func TestNICAgentTrustsNoLookAlike(t *testing.T) {
	ctx := context.Background()
	sel, _ := moveNodes(ctx, t)
	ns := testNamespace(t)

	ghost := crawler(ns, "ghost", onMoveNodes(sel), func(c *isov1.CrawlerVM) {
		c.Spec.Guest.Image = "localhost/isochron/no-such-guest:e2e"
	})
	if err := cl.Create(ctx, ghost); err != nil {
		t.Fatalf("creating CrawlerVM: %v", err)
	}
	waitFor(t, placeTimeout, "the ghost crawler placed", func() (bool, string, error) {
		placed := condition(ctx, t, ghost, isov1.ConditionPlaced)
		return placed != nil && placed.Status == metav1.ConditionTrue && ghost.Status.Placement != nil, fmt.Sprintf("Placed: %v", placed), nil
	})
	node := ghost.Status.Placement.Node
	if ghost.Status.Sizing == nil || ghost.Status.Sizing.HostCPUs == 0 {
		t.Fatalf("the ghost crawler is not dedicated: %+v", ghost.Status.Sizing)
	}
	domain := ns + "_" + ghost.Name
	t.Logf("dedicated crawler %s/%s placed on %s; a look-alike of its QEMU (domain %s) starts there", ns, ghost.Name, node, domain)

	lookAlike(ctx, t, ns, node, domain)
	handler := handlerPod(ctx, t, node)
	start := time.Now()
	seen := false
	for time.Since(start) < lookAlikeWatch {
		policy, tid, err := lookAlikePolicy(handler, domain)
		switch {
		case err != nil:
			t.Logf("reading the look-alike's thread: %v", err)
		case policy != 0:
			t.Fatalf("the look-alike's thread \"CPU 0/KVM\" (host TID %d) has scheduling policy %d %s after it started: the NIC agent made a process of another pod realtime", tid, policy, time.Since(start).Round(time.Second))
		default:
			seen = true
		}
		time.Sleep(5 * time.Second) // paces the reads of a state that must not change
	}
	if !seen {
		t.Fatalf("the look-alike's thread was never read on %s", node)
	}
	if e := vcpuEvent(ctx, t, ghost, time.Time{}, 0); e != nil {
		t.Errorf("the NIC agent says it made the ghost crawler's vCPUs realtime: %s", e.Message)
	}
	t.Logf("the look-alike's thread stayed SCHED_OTHER for %s", lookAlikeWatch)

	primaryNICIsNotReshaped(ctx, t, ns, node)
}

// lookAlike runs the look-alike of domain's QEMU (e2e/lookalike) on node in ns: an
// unprivileged pod, no capability, its program from a ConfigMap.
func lookAlike(ctx context.Context, t *testing.T, ns, node, domain string) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "qemu")
	if out, err := exec.Command("gcc", "-static", "-Os", "-s", "-o", bin, "lookalike/qemu.c", "-lpthread").CombinedOutput(); err != nil {
		t.Fatalf("building the look-alike: %v\n%s", err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lookalike"}, BinaryData: map[string][]byte{"qemu": b}}
	if err := cl.Create(ctx, cm); err != nil {
		t.Fatalf("creating the look-alike's ConfigMap (%d bytes): %v", len(b), err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lookalike"},
		Spec: corev1.PodSpec{
			NodeName: node,
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(int64(65534)),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: "qemu", Image: probeImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"/lookalike/qemu", "guest=" + domain + ",debug-threads=on"},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
				Resources:    corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}},
				VolumeMounts: []corev1.VolumeMount{{Name: "bin", MountPath: "/lookalike"}},
			}},
			Volumes: []corev1.Volume{{Name: "bin", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name}, DefaultMode: ptr.To(int32(0o555))}}}},
		},
	}
	if err := cl.Create(ctx, pod); err != nil {
		t.Fatalf("creating the look-alike's pod: %v", err)
	}
	waitFor(t, 3*time.Minute, "the look-alike running", func() (bool, string, error) {
		if err := cl.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return false, "", err
		}
		return pod.Status.Phase == corev1.PodRunning, string(pod.Status.Phase), nil
	})
}

// lookAlikePolicy reads, in virt-handler's pod on the node (the host's PID namespace),
// the scheduling policy of the look-alike's thread "CPU 0/KVM" and its host TID. The
// look-alike is told from a real QEMU by its argv[0], "qemu-system-x86_64" without a path.
func lookAlikePolicy(handler *corev1.Pod, domain string) (policy, tid int, err error) {
	script := `for d in /proc/[0-9]*; do if tr '\0' ' ' < $d/cmdline 2>/dev/null | grep -q -- "^qemu-system-x86_64 -name guest=` + domain + `,"; then p=${d#/proc/}; break; fi; done
[ -n "$p" ] || { echo "no look-alike of ` + domain + `" >&2; exit 1; }
for t in /proc/$p/task/*; do if [ "$(cat $t/comm)" = "CPU 0/KVM" ]; then echo "${t##*/} $(cat $t/stat)"; exit; fi; done
echo "look-alike $p has no thread CPU 0/KVM" >&2; exit 1`
	out, err := exec.Command(kubectl, "exec", "-n", kubevirtNS, handler.Name, "-c", "virt-handler", "--", "sh", "-c", script).Output()
	if err != nil {
		return 0, 0, fmt.Errorf("%w%s", err, stderrOf(err))
	}
	id, stat, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	if tid, err = strconv.Atoi(id); err != nil {
		return 0, 0, fmt.Errorf("thread ID %q", id)
	}
	// Field 41 is the policy; fields are counted from the comm's closing parenthesis.
	f := strings.Fields(stat[strings.LastIndex(stat, ")")+1:])
	if len(f) < 39 {
		return 0, 0, fmt.Errorf("stat %q", stat)
	}
	policy, err = strconv.Atoi(f[41-3])
	return policy, tid, err
}

// primaryNICIsNotReshaped: a tenant's network that names the node's primary NIC (the
// interface of its default route) as RT uplink is refused, and the agent programs
// nothing on that NIC.
func primaryNICIsNotReshaped(ctx context.Context, t *testing.T, ns, node string) {
	t.Helper()
	handler := handlerPod(ctx, t, node)
	out, err := exec.Command(kubectl, "exec", "-n", kubevirtNS, handler.Name, "-c", "virt-handler", "--", "sh", "-c",
		`while read i d r; do [ "$d" = 00000000 ] && { echo $i; exit; }; done < /proc/1/net/route; exit 1`).Output()
	if err != nil {
		t.Fatalf("the default route's interface on %s: %v%s", node, err, stderrOf(err))
	}
	primary := strings.TrimSpace(string(out))
	before := readUplink(ctx, t, node, primary)
	t.Logf("node %s: primary NIC %s, root qdisc %s", node, primary, before.Root)
	if before.Ours {
		t.Fatalf("the primary NIC %s of %s carries isochron's schedule before the test", primary, node)
	}
	nad := &nadv1.NetworkAttachmentDefinition{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "primary", Annotations: map[string]string{isov1.AnnotationRTUplink: primary}},
		Spec:       nadv1.NetworkAttachmentDefinitionSpec{Config: `{"cniVersion":"0.3.1","type":"bridge","bridge":"e2eprimary"}`},
	}
	if err := cl.Create(ctx, nad); err != nil {
		t.Fatalf("creating the NetworkAttachmentDefinition: %v", err)
	}
	cvm := crawler(ns, "greedy", onMoveNodes(map[string]string{corev1.LabelHostname: hostnameOf(ctx, t, node)}), shared, func(c *isov1.CrawlerVM) {
		c.Spec.RTNIC = &isov1.RTNIC{NetworkName: nad.Name, Deadline: metav1.Duration{Duration: 5 * time.Millisecond}, MinBandwidth: resource.MustParse("10M")}
	})
	if err := cl.Create(ctx, cvm); err != nil {
		t.Fatalf("creating CrawlerVM: %v", err)
	}
	waitFor(t, placeTimeout, "the crawler refused with "+isov1.ReasonRTUplinkNotAllowed, func() (bool, string, error) {
		ready := condition(ctx, t, cvm, isov1.ConditionReady)
		return ready != nil && ready.Reason == isov1.ReasonRTUplinkNotAllowed && strings.Contains(ready.Message, primary), fmt.Sprintf("Ready: %v", ready), nil
	})
	waitFor(t, 2*time.Minute, "the NIC agent to say why it schedules nothing for the crawler", func() (bool, string, error) {
		if err := cl.Get(ctx, client.ObjectKeyFromObject(cvm), cvm); err != nil {
			return false, "", err
		}
		n := cvm.Status.RTNIC
		return n != nil && strings.Contains(n.NotScheduled, primary), fmt.Sprintf("status.rtNIC %+v", n), nil
	})
	after := readUplink(ctx, t, node, primary)
	if after.Ours || after.Root != before.Root {
		t.Errorf("the primary NIC %s of %s: root qdisc %s (isochron's: %v), was %s: the agent reshaped it", primary, node, after.Root, after.Ours, before.Root)
	}
	t.Logf("%s refused (%s); %s's root qdisc still %s", cvm.Name, isov1.ReasonRTUplinkNotAllowed, primary, after.Root)
}

// hostnameOf is the hostname label of node.
func hostnameOf(ctx context.Context, t *testing.T, node string) string {
	t.Helper()
	n := &corev1.Node{}
	if err := cl.Get(ctx, client.ObjectKey{Name: node}, n); err != nil {
		t.Fatal(err)
	}
	return n.Labels[corev1.LabelHostname]
}
