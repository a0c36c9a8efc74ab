// Package inventory converts API objects into the plain values the pure core takes: the
// nodes with their contention profiles, the crawlers already placed, the crawler to
// place.
package inventory

import (
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	resourcehelper "k8s.io/component-helpers/resource"
	kubevirtv1 "kubevirt.io/api/core/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/model"
	"isochron.io/isochron/internal/placement"
	"isochron.io/isochron/internal/sizing"
)

const hugepages2Mi corev1.ResourceName = "hugepages-2Mi"

// Node is what placement needs of a Node, with the parameters of the profile that
// describes it (see ProfileFor), what other pods request there (Held) and its correction
// from probes (Correction; cal is its NodeCalibration, nil for none).
func Node(n *corev1.Node, profiles []isov1.ContentionProfile, held placement.Held, cal *isov1.NodeCalibration) placement.Node {
	alloc, capa := n.Status.Allocatable, n.Status.Capacity
	capacityCPUs := float64(capa.Cpu().MilliValue()) / 1000
	if capacityCPUs == 0 {
		capacityCPUs = float64(alloc.Cpu().MilliValue()) / 1000
	}
	profile := ProfileFor(n, profiles)
	params := Params(profile)
	if params.HostReservedCPUs == 0 {
		// kubelet reservedSystemCPUs (and kube/system-reserved) are capacity - allocatable.
		if reserved := float64(capa.Cpu().MilliValue()-alloc.Cpu().MilliValue()) / 1000; reserved > 0 {
			params.HostReservedCPUs = reserved
		}
	}
	return placement.Node{
		Name:           n.Name,
		Labels:         n.Labels,
		Taints:         n.Spec.Taints,
		Unschedulable:  n.Spec.Unschedulable,
		NotReady:       !NodeReady(n),
		CPUMilli:       alloc.Cpu().MilliValue(),
		MemoryBytes:    alloc.Memory().Value(),
		HugepagesBytes: alloc.Name(hugepages2Mi, "BinarySI").Value(),
		CapacityCPUs:   capacityCPUs,
		Held:           held,
		Params:         params,
		Correction:     Correction(profile, cal).Correction,
	}
}

// NodeReady says whether the node is ready: its Ready condition is True, or it reports
// none (a Node written in a file for isochronctl; the API server's new Nodes carry the
// not-ready taint until their kubelet reports).
func NodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return true
}

// ProfileFor is the profile that describes n: of those whose selector matches, the one
// with the highest precedence, then the first by name; nil for none.
func ProfileFor(n *corev1.Node, profiles []isov1.ContentionProfile) *isov1.ContentionProfile {
	var best *isov1.ContentionProfile
	for i := range profiles {
		p := &profiles[i]
		sel, err := metav1.LabelSelectorAsSelector(&p.Spec.NodeSelector)
		if err != nil || !sel.Matches(labels.Set(n.Labels)) {
			continue
		}
		if best == nil || p.Spec.Precedence > best.Spec.Precedence ||
			(p.Spec.Precedence == best.Spec.Precedence && p.Name < best.Name) {
			best = p
		}
	}
	return best
}

// Params are a profile's parameters; unset ones stay zero, which the model reads as its
// defaults.
func Params(p *isov1.ContentionProfile) model.Params {
	var m model.Params
	if p == nil {
		return m
	}
	if c := p.Spec.Crawler; c != nil {
		if c.CPUPerRequest != nil {
			m.CPUPerRequest = c.CPUPerRequest.Duration
		}
		m.PeakFactor1s, _ = c.PeakFactor1s.Float64()           // unset: 0, the model's default
		m.PeakExponent, _ = c.PeakExponent.Float64()           // unset: 0, the model's default
		m.PeakFactorMax, _ = c.PeakFactorMax.Float64()         // unset: 0, the model's default
		m.TargetUtilisation, _ = c.TargetUtilisation.Float64() // unset: 0, the model's default
		if c.OverloadPenalty != nil {
			m.OverloadPenalty = c.OverloadPenalty.Duration
		}
	}
	if h := p.Spec.Host; h != nil {
		if h.IOCostPerRequest != nil {
			m.HostIOCostPerRequest = h.IOCostPerRequest.Duration
		}
		if h.SchedulerGranularity != nil {
			m.SchedulerGranularity = h.SchedulerGranularity.Duration
		}
		if h.ReservedCPUs != nil {
			m.HostReservedCPUs = float64(h.ReservedCPUs.MilliValue()) / 1000
		}
		m.HostIOIsolated = h.IOIsolated
	}
	if nic := p.Spec.NIC; nic != nil {
		if nic.Capacity != nil {
			m.NICCapacityBitsPerSecond = nic.Capacity.Value()
		}
		if nic.LinkRate != nil {
			m.LinkRateBitsPerSecond = nic.LinkRate.Value()
		}
		m.BestEffortPacketBits = nic.BestEffortPacketBits
		m.RequestBits = nic.RequestBits
	}
	return m
}

// Resident is the reservation a CrawlerVM holds: the size and node in its status.
func Resident(c *isov1.CrawlerVM) (placement.Resident, bool) {
	s, p := c.Status.Sizing, c.Status.Placement
	if s == nil || p == nil || p.Node == "" {
		return placement.Resident{}, false
	}
	r := sizing.Result{
		VCPUs:           s.VCPUs,
		HostCPUs:        s.HostCPUs,
		CPURequestMilli: s.CPURequest.MilliValue(),
		MemoryBytes:     s.Memory.Value(),
	}
	if s.Hugepages != nil {
		r.HugepagesBytes = s.Hugepages.Value()
	}
	if s.VFIOMemory != nil {
		r.VFIOBytes = s.VFIOMemory.Value()
	}
	if s.SupportCPU != nil {
		r.SupportCPUMilli = s.SupportCPU.MilliValue()
	}
	if s.SupportMemory != nil {
		r.SupportMemoryBytes = s.SupportMemory.Value()
	}
	key := c.Namespace + "/" + c.Name
	return placement.Resident{Key: key, Node: p.Node, Sizing: r, Workload: placement.Workload(key, demandAsScheduled(c), r)}, true
}

// LeavingKey is the key of the reservation a moving crawler keeps on the node it leaves
// (Leaving), beside its own key's on the node it moves to.
func LeavingKey(key string) string { return key + " (leaving)" }

// Leaving is the reservation a moving crawler keeps on the node it leaves until its move
// ends (status.move.from): kube-scheduler and KubeVirt count both of its virt-launcher
// pods, and its guest runs there until the migration's switch-over. False when the
// crawler is not moving.
func Leaving(c *isov1.CrawlerVM) (placement.Resident, bool) {
	m := c.Status.Move
	res, ok := Resident(c)
	if m == nil || !ok || m.From == "" || m.From == res.Node {
		return placement.Resident{}, false
	}
	res.Key, res.Node = LeavingKey(res.Key), m.From
	res.Workload.Key = res.Key
	return res, true
}

// Residents are every reservation the crawler holds: Resident, and Leaving while it moves.
func Residents(c *isov1.CrawlerVM) []placement.Resident {
	res, ok := Resident(c)
	if !ok {
		return nil
	}
	out := []placement.Resident{res}
	if l, ok := Leaving(c); ok {
		out = append(out, l)
	}
	return out
}

// Demand is a CrawlerVM's spec as what sizing and placement decide on: the one place a
// spec becomes plain values, its objective parsed.
func Demand(spec *isov1.CrawlerVMSpec) sizing.Demand {
	d := sizing.Demand{
		RPS:         spec.RPS,
		Tolerance:   spec.ErrorBudget.Tolerance.Duration,
		Objective:   spec.ErrorBudget.ObjectivePercent(),
		Dedicated:   spec.CPUPlacement != isov1.CPUPlacementShared,
		MemoryBytes: spec.Guest.Memory.Value(),
	}
	if nic := spec.RTNIC; nic != nil {
		d.NIC = &model.NICFlow{Deadline: nic.Deadline.Duration, MinBandwidthBitsPerSecond: nic.MinBandwidth.Value()}
	}
	return d
}

// SizingStatus is a size in the CrawlerVM status form (status.sizing).
func SizingStatus(r sizing.Result) *isov1.Sizing {
	s := &isov1.Sizing{
		VCPUs:      r.VCPUs,
		HostCPUs:   r.HostCPUs,
		CPURequest: *resource.NewMilliQuantity(r.CPURequestMilli, resource.DecimalSI),
		Memory:     *resource.NewQuantity(r.MemoryBytes, resource.BinarySI),
	}
	if r.HugepagesBytes > 0 {
		s.Hugepages = resource.NewQuantity(r.HugepagesBytes, resource.BinarySI)
	}
	if r.VFIOBytes > 0 {
		s.VFIOMemory = resource.NewQuantity(r.VFIOBytes, resource.BinarySI)
	}
	if r.SupportCPUMilli > 0 {
		s.SupportCPU = resource.NewMilliQuantity(r.SupportCPUMilli, resource.DecimalSI)
	}
	if r.SupportMemoryBytes > 0 {
		s.SupportMemory = resource.NewQuantity(r.SupportMemoryBytes, resource.DecimalSI)
	}
	return s
}

// demandAsScheduled is the crawler's demand with its RT-NIC in the class the NIC agent
// schedules it in on its node (status.rtNIC, while it is of the current deadline).
func demandAsScheduled(c *isov1.CrawlerVM) sizing.Demand {
	d := Demand(&c.Spec)
	if n := c.Status.RTNIC; n != nil && d.NIC != nil && n.Deadline.Duration == d.NIC.Deadline {
		d.NIC.Raise = int(n.Raise)
	}
	return d
}

// Request is the placement request for a CrawlerVM; vfio says its RT-NIC is an SR-IOV
// virtual function (render.VFIO), whose pod holds KubeVirt's VFIO memory too, and support
// is what its pod's support containers request (render.Support).
func Request(c *isov1.CrawlerVM, vfio bool, support sizing.Resources) placement.Request {
	req := placement.Request{Key: c.Namespace + "/" + c.Name, Demand: demandAsScheduled(c)}
	req.Demand.VFIO = vfio
	req.Demand.Support = support
	if p := c.Spec.Placement; p != nil {
		req.NodeSelector, req.Tolerations = p.NodeSelector, p.Tolerations
		req.Spread = p.Policy == isov1.PlacementPolicySpread
	}
	if c.Status.Placement != nil {
		req.Current = c.Status.Placement.Node
	}
	return req
}

// Held sums, per node, what pods request there as kube-scheduler's NodeResourcesFit
// counts it (PodHeld).
func Held(pods []corev1.Pod) map[string]placement.Held {
	held := map[string]placement.Held{}
	for i := range pods {
		p := &pods[i]
		if h, ok := PodHeld(p); ok {
			held[p.Spec.NodeName] = held[p.Spec.NodeName].Plus(h)
		}
	}
	return held
}

// PodHeld is what pod p holds of its node as kube-scheduler's NodeResourcesFit counts it:
// a pod bound to the node and not terminated holds its requests with init containers,
// pod-level resources and overhead (component-helpers' PodRequests, the scheduler's own
// function), and of CPU the part the static CPU Manager pins. False for a pod that holds
// nothing, and for a crawler's virt-launcher pod: its CPUs and memory are counted through
// the crawler's reservation. Crawlers' probe pods hold a CPU too, and are counted.
func PodHeld(p *corev1.Pod) (placement.Held, bool) {
	if !Holds(p) || CrawlerLauncher(p) {
		return placement.Held{}, false
	}
	req := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{UseStatusResources: true})
	h := placement.Held{
		CPUMilli:       req.Cpu().MilliValue(),
		ExclusiveMilli: exclusiveMilli(p),
		MemoryBytes:    req.Memory().Value(),
	}
	if hp, ok := req[hugepages2Mi]; ok {
		h.HugepagesBytes = hp.Value()
	}
	return h, true
}

// Holds says whether pod p holds what it requests of its node: bound to one and not
// finished (Succeeded or Failed), as the kubelet and kube-scheduler count it.
func Holds(p *corev1.Pod) bool {
	return p.Spec.NodeName != "" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// LauncherUnschedulable finds, among a VMI's virt-launcher pods, one kube-scheduler
// reports it cannot schedule (PodScheduled False, reason Unschedulable), and returns its
// name and the scheduler's message ("0/3 nodes are available: 1 Insufficient cpu...").
func LauncherUnschedulable(pods []corev1.Pod) (name, message string, ok bool) {
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName != "" || p.Status.Phase != corev1.PodPending {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return p.Name, c.Message, true
			}
		}
	}
	return "", "", false
}

// UnschedulableNode says why kube-scheduler cannot put a crawler's launcher on its node
// for a reason of the node: among the VMI's launcher pods (pods), one pending with
// PodScheduled False, reason Unschedulable, while node is cordoned, or has a NoSchedule
// or NoExecute taint the pod does not tolerate, or lacks a resource the pod asks for
// (its CPUs taken by a pod that preempted the launcher, or placed there by hand). It
// returns the pod, the reason in words and since when the pod has been unschedulable;
// ok is false for any other reason (the pod's own affinity, its volumes), which moving
// the crawler would not cure.
func UnschedulableNode(pods []corev1.Pod, node *corev1.Node) (pod, why string, since time.Time, ok bool) {
	if node == nil {
		return "", "", time.Time{}, false // a node gone is the lost-node path's
	}
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName != "" || p.Status.Phase != corev1.PodPending || !p.DeletionTimestamp.IsZero() {
			continue
		}
		var cond *corev1.PodCondition
		for j := range p.Status.Conditions {
			c := &p.Status.Conditions[j]
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				cond = c
			}
		}
		if cond == nil {
			continue
		}
		switch taint := untolerated(p, node); {
		case node.Spec.Unschedulable:
			why = "node " + node.Name + " is cordoned"
		case taint != nil:
			why = "node " + node.Name + " has the taint " + taint.ToString() + ", which the launcher does not tolerate"
		case strings.Contains(cond.Message, "Insufficient"):
			why = "node " + node.Name + " no longer has what the reservation counted on (" + cond.Message + ")"
		default:
			continue
		}
		return p.Name, why, cond.LastTransitionTime.Time, true
	}
	return "", "", time.Time{}, false
}

// untolerated is a NoSchedule or NoExecute taint of node that pod p does not tolerate.
func untolerated(p *corev1.Pod, node *corev1.Node) *corev1.Taint {
	for i := range node.Spec.Taints {
		t := &node.Spec.Taints[i]
		if t.Effect != corev1.TaintEffectNoSchedule && t.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		if !slices.ContainsFunc(p.Spec.Tolerations, func(tol corev1.Toleration) bool { return placement.Tolerates(&tol, t) }) {
			return t
		}
	}
	return nil
}

// LauncherRejected finds, among virt-launcher pods, one of the VMIs of vmiUIDs that the
// kubelet of its node refused or ended for a reason of the node (its admission: OutOfcpu,
// TopologyAffinityError when the CPU Manager cannot pin it, NodeAffinity...; an eviction
// under node pressure), and returns its name, node and the kubelet's reason and message.
// KubeVirt's crash-loop backoff cannot cure such a failure: the node must change.
func LauncherRejected(pods []corev1.Pod, vmiUIDs ...string) (name, node, reason, message string, ok bool) {
	for i := range pods {
		p := &pods[i]
		if p.Status.Phase != corev1.PodFailed || !slices.Contains(vmiUIDs, p.Labels[kubevirtv1.CreatedByLabel]) || p.Spec.NodeName == "" {
			continue
		}
		if r := p.Status.Reason; strings.HasPrefix(r, "OutOf") || slices.Contains(nodeRejections, r) {
			return p.Name, p.Spec.NodeName, r, p.Status.Message, true
		}
	}
	return "", "", "", "", false
}

// nodeRejections are the reasons a kubelet fails a pod for its node, not for the pod
// (besides OutOf<resource>): its admission handlers and its eviction manager.
var nodeRejections = []string{"UnexpectedAdmissionError", "TopologyAffinityError", "SMTAlignmentError", "NodeAffinity", "InvalidNodeInfo", "Evicted"}

// CrawlerLauncher says whether p is the virt-launcher pod of a crawler's VMI: KubeVirt's
// launcher label, and the crawler's label the VMI passes on.
func CrawlerLauncher(p *corev1.Pod) bool {
	_, crawler := p.Labels[isov1.LabelCrawlerVM]
	return crawler && p.Labels[kubevirtv1.AppLabel] == "virt-launcher"
}

// exclusiveMilli is what the static CPU Manager pins for p: the whole-CPU requests of
// its containers when the pod is Guaranteed (every container's requests equal limits).
func exclusiveMilli(p *corev1.Pod) int64 {
	var total int64
	for _, c := range p.Spec.Containers {
		req, lim := c.Resources.Requests, c.Resources.Limits
		cpu, memReq := req.Cpu(), req.Memory()
		if cpu.IsZero() || !cpu.Equal(*lim.Cpu()) || memReq.IsZero() || !memReq.Equal(*lim.Memory()) {
			return 0 // not Guaranteed: every CPU comes from the shared pool
		}
		if cpu.MilliValue()%1000 == 0 {
			total += cpu.MilliValue()
		}
	}
	return total
}

// SortCrawlers orders crawlers by namespace/name, the order isochronctl plans them in.
func SortCrawlers(cs []*isov1.CrawlerVM) {
	sort.Slice(cs, func(i, j int) bool {
		return cs[i].Namespace+"/"+cs[i].Name < cs[j].Namespace+"/"+cs[j].Name
	})
}
