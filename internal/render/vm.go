package render

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

// isochron runs each crawler as a KubeVirt VirtualMachine it owns, so that KubeVirt
// itself restarts a VMI that fails (docs/availability.md).
//
// RunStrategyAlways is the VM's run strategy: KubeVirt starts a new VMI whenever none
// runs, whether the guest crashed (Failed), shut itself down (Succeeded) or the VMI was
// deleted (a restart isochron asks for, a node lost and fenced). RerunOnFailure would
// leave a crawler down for good after a guest shutdown or a deleted VMI (KubeVirt v1.8
// vm.go syncRunStrategy), and every interval a crawler is down counts against the same
// 99.999% as one measured late. A person stops a crawler with `virtctl stop`, which sets
// the strategy to Halted; isochron keeps that (Input.RunStrategy) until `virtctl start`.
const RunStrategyAlways = kubevirtv1.RunStrategyAlways

// VM renders the VirtualMachine that runs the crawler: its template is the VMI (VMI),
// with the node as required affinity, evictionStrategy External (a drain hands the
// crawler to isochron, which moves it by live migration to a node it chooses), and the
// hash of its inputs other than the node (AnnotationVMInputs), which the VMIs KubeVirt
// starts from it carry. The VM is controlled by the crawler when the crawler has a UID.
func VM(in Input) (*kubevirtv1.VirtualMachine, error) {
	vmi, err := VMI(in)
	if err != nil {
		return nil, err
	}
	strategy := in.RunStrategy
	if strategy == "" {
		strategy = RunStrategyAlways
	}
	meta := metav1.ObjectMeta{Name: vmi.Name, Namespace: vmi.Namespace, Labels: labels(in.CrawlerVM)}
	if in.CrawlerVM.UID != "" {
		meta.OwnerReferences = []metav1.OwnerReference{OwnerReference(in.CrawlerVM)}
	}
	return &kubevirtv1.VirtualMachine{
		TypeMeta:   metav1.TypeMeta{APIVersion: kubevirtv1.GroupVersion.String(), Kind: "VirtualMachine"},
		ObjectMeta: meta,
		Spec: kubevirtv1.VirtualMachineSpec{
			RunStrategy: ptr.To(strategy),
			Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: vmi.Labels, Annotations: vmi.Annotations},
				Spec:       vmi.Spec,
			},
		},
	}, nil
}

// labels are the labels of a crawler's VM, its VMIs and (KubeVirt passes them on) their
// virt-launcher pods.
func labels(cvm *isov1.CrawlerVM) map[string]string {
	return map[string]string{isov1.LabelManagedBy: isov1.ManagedBy, isov1.LabelCrawlerVM: cvm.Name}
}

// VMInputsHash identifies what a VM's template is rendered from, its node excepted (see
// inputs): a VM whose template differs only by the node is moved, by live migration, not
// restarted (KubeVirt applies a new affinity to the running VMI).
func VMInputsHash(in Input) string {
	x := inputsOf(in)
	x.Node = ""
	b, err := json.Marshal(x)
	if err != nil {
		panic(err) // plain values: cannot fail
	}
	return hashOf(b)
}

// Affinity is the required node affinity that pins a crawler's VMI to node; for node ""
// (a crawler that holds no reservation: Parked) it matches no node, so that a VMI started
// meanwhile (virtctl start) waits, unscheduled, for isochron to place it.
func Affinity(node string) *corev1.Affinity {
	term := corev1.NodeSelectorRequirement{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}
	if node == "" {
		// Every node has its hostname label: the kubelet sets it.
		term = corev1.NodeSelectorRequirement{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpDoesNotExist}
	}
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{term}}},
		},
	}}
}

// Parked says whether a VMI spec's affinity is Affinity(""): pinned to no node.
func Parked(spec *kubevirtv1.VirtualMachineInstanceSpec) bool {
	a := spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return false
	}
	for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, e := range t.MatchExpressions {
			if e.Key == corev1.LabelHostname && e.Operator == corev1.NodeSelectorOpDoesNotExist {
				return true
			}
		}
	}
	return false
}

// UnmigratableDisk is a disk of the VMI spec that no live migration can carry, "" for
// none: a read-only disk on a volume KubeVirt copies to the migration target (a
// containerDisk, cloud-init, a ConfigMap, Secret, downward API or service account: its
// "generated" volumes), which libvirt refuses to copy ("Cannot migrate empty or
// read-only disk"), while KubeVirt still reports the VMI live-migratable (KubeVirt v1.8,
// pkg/virt-launcher/virtwrap/live-migration-source.go, getDiskTargetsForMigration).
// isochron rendered its agent disk read-only before it learnt this: crawlers started by
// those releases have one until their next start.
func UnmigratableDisk(spec *kubevirtv1.VirtualMachineInstanceSpec) string {
	copied := map[string]bool{}
	for _, v := range spec.Volumes {
		s := v.VolumeSource
		copied[v.Name] = s.ContainerDisk != nil || s.CloudInitNoCloud != nil || s.CloudInitConfigDrive != nil ||
			s.ConfigMap != nil || s.Secret != nil || s.DownwardAPI != nil || s.ServiceAccount != nil
	}
	for _, d := range spec.Domain.Devices.Disks {
		if d.Disk != nil && d.Disk.ReadOnly && copied[d.Name] {
			return d.Name
		}
	}
	return ""
}

// PinnedNode is the node a VMI spec's required affinity pins it to (Affinity), "" for none.
func PinnedNode(spec *kubevirtv1.VirtualMachineInstanceSpec) string {
	a := spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return ""
	}
	for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, e := range t.MatchExpressions {
			if e.Key == corev1.LabelHostname && e.Operator == corev1.NodeSelectorOpIn && len(e.Values) == 1 {
				return e.Values[0]
			}
		}
	}
	return ""
}

// VMWrite is what isochron writes to bring a crawler's VM in line with its inputs.
type VMWrite int

const (
	// WriteNothing: the VM's template is rendered from the current inputs.
	WriteNothing VMWrite = iota
	// WriteApply: an input other than the node changed (or the VM predates the hash): the
	// whole VM is applied. KubeVirt applies what it can to the running VMI (node
	// selector, tolerations) and reports RestartRequired for the rest.
	WriteApply
	// WriteAffinity: only the node changed (a move): the template's affinity alone is
	// patched, whatever release rendered the rest, so that KubeVirt applies it to the
	// running VMI without asking for a restart.
	WriteAffinity
)

// Restarting says whether the VM's next VMI is the one KubeVirt starts from the template
// written now: no VMI runs (none, or a person stopped it), or the one there is ending
// (Failed or Succeeded: a crash, a guest's shutdown; or being deleted: a restart, a cold
// move). KubeVirt starts the next VMI from the template once the ending one is gone.
func Restarting(vmi *kubevirtv1.VirtualMachineInstance) bool {
	return vmi == nil || !vmi.DeletionTimestamp.IsZero() || vmi.IsFinal()
}

// PlanVMWrite decides what to write to vm, the crawler's VM as the API server has it, for
// the inputs in. stopped says that no VMI of the VM runs on (Restarting): a template an
// earlier release rendered otherwise (its user data inline, without the guest Secret and
// the probe key; another release's agent image) is written anew only then, for the next
// VMI to start from it. While a VMI runs, such a template stays: KubeVirt would ask for a
// restart to apply it, and would apply no live update (a move's affinity) until then.
func PlanVMWrite(vm *kubevirtv1.VirtualMachine, in Input, stopped bool) VMWrite {
	t := vm.Spec.Template
	if t == nil || t.ObjectMeta.Annotations[isov1.AnnotationVMInputs] != VMInputsHash(in) {
		return WriteApply
	}
	if stopped && renderedOtherwise(&t.Spec, in) {
		return WriteApply
	}
	if PinnedNode(&t.Spec) != in.Node {
		return WriteAffinity
	}
	return WriteNothing
}

// renderedOtherwise says whether a template spec of the same inputs differs from what this
// release renders for them where the guest sees it: where its user data comes from, and
// its agent's image.
func renderedOtherwise(spec *kubevirtv1.VirtualMachineInstanceSpec, in Input) bool {
	want, err := VMI(in)
	if err != nil {
		return false // nothing this release could write instead
	}
	return guestDelivery(spec) != guestDelivery(&want.Spec)
}

// guestDelivery sums up what a VMI spec gives the guest beyond its inputs: the source of
// its user data and the image of its agent's disk (with the Secret it is pulled with).
func guestDelivery(spec *kubevirtv1.VirtualMachineInstanceSpec) string {
	var from, agent string
	for _, v := range spec.Volumes {
		switch {
		case v.Name == VolumeCloudInit && v.CloudInitNoCloud != nil && v.CloudInitNoCloud.UserDataSecretRef != nil:
			from = "secret " + v.CloudInitNoCloud.UserDataSecretRef.Name
		case v.Name == VolumeCloudInit && v.CloudInitNoCloud != nil:
			from = "inline"
		case v.Name == VolumeAgent && v.ContainerDisk != nil:
			agent = v.ContainerDisk.Image
			if s := v.ContainerDisk.ImagePullSecret; s != "" {
				agent += " pulled with " + s
			}
		}
	}
	return from + "; agent " + agent
}

// AffinityPatch is the merge patch that pins a VM's template to node (WriteAffinity).
func AffinityPatch(node string) ([]byte, error) {
	p := map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"affinity": Affinity(node)}}}}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("encoding the affinity patch: %w", err)
	}
	return b, nil
}
