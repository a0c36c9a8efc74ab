package deploy

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/controllers"
	"isochron.io/isochron/internal/render"
	"isochron.io/isochron/internal/slo"
	"isochron.io/isochron/test/support/binary"
)

// agentPod is the pod of the NIC agent on node, as its DaemonSet makes it: in the
// agent's namespace, with the agent's ServiceAccount, bound to node. It is only an API
// object here (no kubelet runs it); a token bound to it names its node.
func agentPod(t *testing.T, node string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: nicAgentNS, Name: "isochron-nic-agent-" + node},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: nicAgentSA, AutomountServiceAccountToken: ptr(false),
			Containers: []corev1.Container{{Name: "nic-agent", Image: "nic-agent"}}},
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod); err == nil {
		return pod
	}
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatalf("creating the NIC agent's pod on %s: %v", node, err)
	}
	return pod
}

// podBoundToken is a token of the NIC agent's ServiceAccount bound to pod, as the
// kubelet projects it into the agent's container: the API server names the pod's node
// in its user info (authentication.kubernetes.io/node-name).
func podBoundToken(t *testing.T, pod *corev1.Pod) string {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(nicAgentNS).CreateToken(context.Background(), nicAgentSA, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr(int64(3600)),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a token bound to pod %s: %v", pod.Name, err)
	}
	return tr.Status.Token
}

// agentKubeconfig is a kubeconfig of the NIC agent on node, its token bound to its pod.
func agentKubeconfig(t *testing.T, node string) string {
	t.Helper()
	return binary.Kubeconfig(t, env.Config, &clientcmdapi.AuthInfo{Token: podBoundToken(t, agentPod(t, node))}, nicAgentNS)
}

// impersonating is a client of the API server that acts as user in groups (and
// system:authenticated), as the tests' tenants and KubeVirt's components.
func impersonating(t *testing.T, user string, groups ...string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: append(groups, "system:authenticated")}
	c, err := client.New(cfg, client.Options{Scheme: controllers.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// grant creates a Role of rules in namespace ns, bound to subjects.
func grant(t *testing.T, ns, name string, rules []rbacv1.PolicyRule, subjects ...rbacv1.Subject) {
	t.Helper()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Rules: rules}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name}, Subjects: subjects}
	for _, o := range []client.Object{role, binding} {
		if err := env.Client.Create(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
}

// clientWithToken is a client that authenticates with token.
func clientWithToken(t *testing.T, token string) client.Client {
	t.Helper()
	cfg := rest.AnonymousClientConfig(env.Config)
	cfg.BearerToken = token
	c, err := client.New(cfg, client.Options{Scheme: controllers.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// applyRTNIC writes status.rtNIC of crawler key as the NIC agent does (server-side
// apply, its field owner), with c.
func applyRTNIC(c client.Client, key client.ObjectKey, extra map[string]any) error {
	status := map[string]any{"rtNIC": map[string]any{"class": "EF", "raise": int64(0), "deadline": "5ms", "clean": int64(0), "uplink": "eth1"}}
	for k, v := range extra {
		status[k] = v
	}
	u := &unstructured.Unstructured{Object: map[string]any{"status": status}}
	u.SetGroupVersionKind(isov1.GroupVersion.WithKind("CrawlerVM"))
	u.SetNamespace(key.Namespace)
	u.SetName(key.Name)
	return c.Status().Apply(context.Background(), client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(isov1.NICAgent), client.ForceOwnership)
}

// testNICAgentIsBoundToItsNode plays a NIC agent's stolen token, and one of another
// node, against config/default's admission policy nic-agent-node-bound: an agent writes
// status.rtNIC of the crawlers placed on its node and nothing else.
func testNICAgentIsBoundToItsNode(t *testing.T, crawlers []client.ObjectKey) {
	ctx := context.Background()
	placed := map[string]client.ObjectKey{}
	for _, key := range crawlers {
		c := &isov1.CrawlerVM{}
		if err := env.Client.Get(ctx, key, c); err != nil {
			t.Fatal(err)
		}
		if c.Status.Placement != nil {
			placed[c.Status.Placement.Node] = key
		}
	}
	for node, key := range placed {
		own := clientWithToken(t, podBoundToken(t, agentPod(t, node)))
		waitFor(t, "the agent of "+node+" to write status.rtNIC of "+key.String(), func() (bool, string) {
			err := applyRTNIC(own, key, nil)
			return err == nil, fmt.Sprint(err)
		})
		if err := applyRTNIC(own, key, map[string]any{"placement": map[string]any{"node": "elsewhere"}}); err == nil ||
			!strings.Contains(err.Error(), "the NIC agent may change only status.rtNIC") {
			t.Errorf("the agent of %s moved %s: %v; want refused (only status.rtNIC)", node, key, err)
		}
		for other := range placed {
			if other == node {
				continue
			}
			stranger := clientWithToken(t, podBoundToken(t, agentPod(t, other)))
			err := applyRTNIC(stranger, key, nil)
			if err == nil || !strings.Contains(err.Error(), "the NIC agent of node "+other+" may write only the crawlers placed on its node") {
				t.Errorf("the agent of %s wrote %s, placed on %s: %v; want refused", other, key, node, err)
			}
		}
		// A token of the agent's ServiceAccount that names no node (a TokenRequest
		// without a pod, a token copied out of a Secret) writes nothing.
		unbound := clientWithToken(t, token(t, nicAgentNS, nicAgentSA))
		if err := applyRTNIC(unbound, key, nil); err == nil || !strings.Contains(err.Error(), "names no node") {
			t.Errorf("an unbound token of the agent wrote %s: %v; want refused", key, err)
		}
	}
	if len(placed) < 2 {
		t.Errorf("the samples are placed on %d node(s): the test needs two to play one node's agent against another's", len(placed))
	}
}

// testLauncherIdentity plays a namespace editor against config/default's admission
// policy launcher-identity: KubeVirt's edit role lets it write a VMI whole, status
// included, and the NIC agent believes status.activePods to tell a VMI's launcher pod.
// Only KubeVirt's ServiceAccounts may write that field.
func testLauncherIdentity(t *testing.T) {
	ctx := context.Background()
	const ns = "tenant-l"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	// The tenant may do with VMIs what KubeVirt's kubevirt.io:edit role allows; so may
	// KubeVirt's controller (cluster-wide, in a real install).
	grant(t, ns, "vmi-editor", []rbacv1.PolicyRule{{
		APIGroups: []string{"kubevirt.io"}, Resources: []string{"virtualmachineinstances"},
		Verbs: []string{"get", "delete", "create", "update", "patch", "list", "watch"},
	}}, rbacv1.Subject{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: "alice"},
		rbacv1.Subject{Kind: "ServiceAccount", Namespace: "kubevirt", Name: "kubevirt-controller"})
	alice := impersonating(t, "alice")
	kubevirt := impersonating(t, "system:serviceaccount:kubevirt:kubevirt-controller", "system:serviceaccounts", "system:serviceaccounts:kubevirt")
	vmi := func(name string, pods map[types.UID]string) *kubevirtv1.VirtualMachineInstance {
		v := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		v.Spec.Domain.Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}
		v.Status.ActivePods = pods
		return v
	}
	waitFor(t, "the policy to refuse a tenant's VMI that names its launcher", func() (bool, string) {
		err := alice.Create(ctx, vmi("forged", map[types.UID]string{"0000-impostor": "rt-node-1"}), client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "only KubeVirt"), fmt.Sprint(err)
	})
	mine := vmi("mine", nil)
	if err := alice.Create(ctx, mine); err != nil {
		t.Fatalf("a tenant's VMI without status.activePods: %v", err)
	}
	// KubeVirt names its launcher; the tenant cannot name another, nor add one.
	mine.Status.ActivePods = map[types.UID]string{"1111-launcher": "rt-node-1"}
	if err := kubevirt.Update(ctx, mine); err != nil {
		t.Fatalf("KubeVirt writing status.activePods: %v", err)
	}
	for name, pods := range map[string]map[types.UID]string{
		"another pod":  {"0000-impostor": "rt-node-1"},
		"one more pod": {"1111-launcher": "rt-node-1", "0000-impostor": "rt-node-1"},
	} {
		forged := mine.DeepCopy()
		forged.Status.ActivePods = pods
		if err := alice.Update(ctx, forged); err == nil || !strings.Contains(err.Error(), "only KubeVirt") {
			t.Errorf("a tenant naming %s in status.activePods: %v; want refused", name, err)
		}
	}
	// Nor can a tenant give its own pod the priority of crawlers' launchers (which keeps
	// them from being preempted); KubeVirt, creating a launcher, can.
	grant(t, ns, "pod-creator", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create"}}},
		rbacv1.Subject{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: "alice"},
		rbacv1.Subject{Kind: "ServiceAccount", Namespace: "kubevirt", Name: "kubevirt-controller"})
	pod := func() *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "favoured"},
			Spec: corev1.PodSpec{PriorityClassName: isov1.PriorityClassRealtime, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	}
	waitFor(t, "the policy to refuse a tenant's pod of isochron's priority class", func() (bool, string) {
		err := alice.Create(ctx, pod(), client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "only KubeVirt may create pods of it"), fmt.Sprint(err)
	})
	if err := kubevirt.Create(ctx, pod(), client.DryRunAll); err != nil {
		t.Errorf("KubeVirt creating a launcher of isochron's priority class: %v", err)
	}
	// Nor can a tenant label its pod as a crawler's launcher, whose CPUs isochron counts
	// through the crawler's reservation (the pod's own would go uncounted).
	launcher := func() *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "virt-launcher-lookalike",
			Labels: map[string]string{kubevirtv1.AppLabel: "virt-launcher", isov1.LabelCrawlerVM: "tower-a"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "compute", Image: "busybox"}}}}
	}
	waitFor(t, "the policy to refuse a tenant's pod labelled as a crawler's launcher", func() (bool, string) {
		err := alice.Create(ctx, launcher(), client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "only KubeVirt creates"), fmt.Sprint(err)
	})
	if err := kubevirt.Create(ctx, launcher(), client.DryRunAll); err != nil {
		t.Errorf("KubeVirt creating a crawler's launcher: %v", err)
	}
	plain := launcher()
	delete(plain.Labels, isov1.LabelCrawlerVM)
	if err := alice.Create(ctx, plain, client.DryRunAll); err != nil {
		t.Errorf("a tenant's pod with KubeVirt's label only: %v; want admitted (isochron counts it)", err)
	}

	// Everything else of its own VMI's status stays the tenant's to write, as before.
	other := mine.DeepCopy()
	other.Status.Reason = "tenant"
	if err := alice.Update(ctx, other); err != nil {
		t.Errorf("a tenant's write that leaves status.activePods alone: %v", err)
	}
}

// testVMOwnership plays a namespace editor against config/default's admission policy
// vm-ownership: KubeVirt's edit role lets it write VMs, and a crawler's VM is isochron's.
// It cannot change its spec (here, the node it is pinned to) or make a VM with
// isochron's labels; annotations stay free, and KubeVirt (virtctl stop) still acts.
func testVMOwnership(t *testing.T, crawler client.ObjectKey) {
	ctx := context.Background()
	ns := crawler.Namespace
	grant(t, ns, "vm-editor", []rbacv1.PolicyRule{{
		APIGroups: []string{"kubevirt.io"}, Resources: []string{"virtualmachines"},
		Verbs: []string{"get", "delete", "create", "update", "patch", "list", "watch"},
	}}, rbacv1.Subject{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: "bob"},
		rbacv1.Subject{Kind: "ServiceAccount", Namespace: "kubevirt", Name: "kubevirt-apiserver"})
	bob := impersonating(t, "bob")
	virtAPI := impersonating(t, "system:serviceaccount:kubevirt:kubevirt-apiserver", "system:serviceaccounts", "system:serviceaccounts:kubevirt")
	vm := &kubevirtv1.VirtualMachine{}
	waitFor(t, "the crawler's VM", func() (bool, string) {
		err := env.Client.Get(ctx, crawler, vm)
		return err == nil, fmt.Sprint(err)
	})
	patch := func(c client.Client, body string) error {
		return c.Patch(ctx, vm.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(body)))
	}
	moved := `{"spec":{"template":{"spec":{"nodeSelector":{"kubernetes.io/hostname":"elsewhere"}}}}}`
	waitFor(t, "the policy to refuse a tenant's change of the crawler's VM spec", func() (bool, string) {
		err := patch(bob, moved)
		return err != nil && strings.Contains(err.Error(), "is rendered by isochron") && strings.Contains(err.Error(), "change the CrawlerVM instead"), fmt.Sprint(err)
	})
	if err := patch(bob, `{"metadata":{"labels":{"isochron.io/crawlervm":"other"}}}`); err == nil {
		t.Error("a tenant changed isochron's label on the crawler's VM")
	}
	if err := patch(bob, `{"metadata":{"annotations":{"example.com/note":"mine"}}}`); err != nil {
		t.Errorf("a tenant's annotation on the crawler's VM: %v; want admitted", err)
	}
	if err := patch(virtAPI, `{"spec":{"runStrategy":"Halted"}}`); err != nil {
		t.Errorf("KubeVirt stopping the crawler's VM (virtctl stop): %v; want admitted", err)
	}
	if err := patch(virtAPI, `{"spec":{"runStrategy":"Always"}}`); err != nil {
		t.Errorf("KubeVirt starting the crawler's VM (virtctl start): %v; want admitted", err)
	}
	forged := vm.DeepCopy()
	forged.ObjectMeta = metav1.ObjectMeta{Namespace: ns, Name: "forged", Labels: vm.Labels}
	forged.Spec.RunStrategy = nil
	halted := kubevirtv1.RunStrategyHalted
	forged.Spec.RunStrategy = &halted
	if err := bob.Create(ctx, forged, client.DryRunAll); err == nil || !strings.Contains(err.Error(), "only isochron creates those") {
		t.Errorf("a tenant creating a VM with isochron's labels: %v; want refused", err)
	}
}

// testManagerWrites plays a thief holding the manager's token against config/default's
// admission policies manager-writes and manager-probe-image: its RBAC lets it create
// Jobs, Services and VMs in every namespace, and those policies keep that right to what
// isochron renders. The manager's own shapes (slo.Job, slo.Service, the crawler's VM) are
// admitted; each variation a thief would make is refused.
func testManagerWrites(t *testing.T, crawler client.ObjectKey, probeImage string) {
	ctx := context.Background()
	asManager := clientWithToken(t, token(t, systemNS, managerSA))
	cvm := &isov1.CrawlerVM{}
	if err := env.Client.Get(ctx, crawler, cvm); err != nil {
		t.Fatal(err)
	}
	vm := &kubevirtv1.VirtualMachine{}
	waitFor(t, "the crawler's VM", func() (bool, string) {
		err := env.Client.Get(ctx, crawler, vm)
		return err == nil, fmt.Sprint(err)
	})
	job := func(f func(*batchv1.Job)) client.Object {
		j := slo.Job(cvm, slo.Run{Trigger: isov1.TriggerStart, Generation: cvm.Generation}, slo.Target{},
			slo.Options{Image: probeImage, Grace: time.Minute, TTL: time.Hour, NameKey: []byte("k")})
		j.Name = "shape"
		f(j)
		return j
	}
	svc := func(f func(*corev1.Service)) client.Object {
		s := slo.Service(cvm)
		s.Name = "shape"
		f(s)
		return s
	}
	vmOf := func(f func(*kubevirtv1.VirtualMachine)) client.Object {
		v := vm.DeepCopy()
		v.ObjectMeta = metav1.ObjectMeta{Namespace: vm.Namespace, Name: "shape", Labels: vm.Labels, OwnerReferences: vm.OwnerReferences}
		f(v)
		return v
	}
	for name, o := range map[string]client.Object{
		"its probe Job":     job(func(*batchv1.Job) {}),
		"its probe Service": svc(func(*corev1.Service) {}),
		"its crawler's VM":  vmOf(func(*kubevirtv1.VirtualMachine) {}),
	} {
		if err := asManager.Create(ctx, o, client.DryRunAll); err != nil {
			t.Errorf("the manager creating %s: %v; want admitted", name, err)
		}
	}
	if t.Failed() {
		return
	}
	spec := func(f func(*corev1.PodSpec)) client.Object {
		return job(func(j *batchv1.Job) { f(&j.Spec.Template.Spec) })
	}
	for name, o := range map[string]client.Object{
		"a Job no crawler controls":          job(func(j *batchv1.Job) { j.OwnerReferences = nil }),
		"a Job labelled for another crawler": job(func(j *batchv1.Job) { j.Labels[isov1.LabelCrawlerVM] = "other" }),
		"a Job as another service account":   spec(func(p *corev1.PodSpec) { p.ServiceAccountName = "admin" }),
		"a Job that mounts its token":        spec(func(p *corev1.PodSpec) { p.AutomountServiceAccountToken = nil }),
		"a Job of another image":             spec(func(p *corev1.PodSpec) { p.Containers[0].Image = "example.com/miner:latest" }),
		"a Job with an init container": spec(func(p *corev1.PodSpec) {
			p.InitContainers = []corev1.Container{{Name: "x", Image: probeImage, Command: []string{"/x"}}}
		}),
		"a Job on the host's network": spec(func(p *corev1.PodSpec) { p.HostNetwork = true }),
		"a Job that mounts the host": spec(func(p *corev1.PodSpec) {
			p.Volumes = []corev1.Volume{{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
		}),
		"a privileged Job": spec(func(p *corev1.PodSpec) {
			p.Containers[0].SecurityContext.Privileged, p.Containers[0].SecurityContext.AllowPrivilegeEscalation = ptr(true), nil
		}),
		"a Job that reads another Secret": spec(func(p *corev1.PodSpec) {
			p.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "db-password"}}}}
		}),
		"a Service with an external IP": svc(func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"192.0.2.1"} }),
		"a NodePort Service":            svc(func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort }),
		"a VM that mounts a service account": vmOf(func(v *kubevirtv1.VirtualMachine) {
			v.Spec.Template.Spec.Volumes = append(v.Spec.Template.Spec.Volumes, kubevirtv1.Volume{Name: "sa",
				VolumeSource: kubevirtv1.VolumeSource{ServiceAccount: &kubevirtv1.ServiceAccountVolumeSource{ServiceAccountName: "admin"}}})
		}),
		"a VM whose agent disk is another image": vmOf(func(v *kubevirtv1.VirtualMachine) {
			for i := range v.Spec.Template.Spec.Volumes {
				if d := v.Spec.Template.Spec.Volumes[i].ContainerDisk; d != nil && v.Spec.Template.Spec.Volumes[i].Name == render.VolumeAgent {
					d.Image = "example.com/miner:latest"
				}
			}
		}),
		"a VM no crawler controls": vmOf(func(v *kubevirtv1.VirtualMachine) { v.OwnerReferences = nil }),
	} {
		err := asManager.Create(ctx, o, client.DryRunAll)
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "the isochron manager") {
			t.Errorf("the manager's account creating %s: %v; want it refused by the manager-writes policies", name, err)
		}
	}
}
