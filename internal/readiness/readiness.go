// Package readiness decides a crawler's Ready condition from what one reconcile read of
// its world (its VM, VMI, launcher pods and node): a chain of checks, each of which, when
// it applies, gives the condition's reason and message and whether the crawler is stuck
// (it cannot become Ready without a change: kstatus' Stalled), in the style of
// cert-manager's policy chains. Whether a reason is stuck is decided here, where the reason
// is set, never from a second list. It is pure: no client, no clock.
package readiness

import (
	"fmt"
	"strings"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/inventory"
	"isochron.io/isochron/internal/move"
)

// Verdict is the Ready condition, and whether the crawler is stuck.
type Verdict struct {
	OK              bool
	Reason, Message string
	// Stuck says the crawler cannot become Ready without a change by someone: kstatus'
	// Stalled. A crawler that is not Ready and not stuck is progressing (Reconciling).
	Stuck bool
}

// Scope is what a reconcile read of the crawler's world, once.
type Scope struct {
	// VM is the crawler's VirtualMachine; VMI its VMI, nil for none (or one that is not
	// its VM's yet).
	VM  *kubevirtv1.VirtualMachine
	VMI *kubevirtv1.VirtualMachineInstance
	// Launchers are the crawler's virt-launcher pods (of its VMI, and of VMIs before it).
	Launchers []corev1.Pod
	// Node is what became of the node the VMI runs on (move.Node).
	Node move.NodeState
	// PlacedOn is the node the crawler is placed on.
	PlacedOn string

	// What isochron found before writing the VM (the checks of BeforeWrite).
	// Crawler is the crawler's UID: what it owns.
	Crawler types.UID
	// Network is what the reconcile found of the crawler's RT network.
	Network Network
	// RenderErr is why the VM cannot be rendered from the spec, nil when it can.
	RenderErr error
}

// Network is what a reconcile found of the crawler's RT network (none without an RT-NIC).
type Network struct {
	// Key is its NetworkAttachmentDefinition's namespace/name.
	Key string
	// NotAllowed says why the crawler's namespace may not use it (render.NetworkAllowed);
	// UplinkNotAllowed why its uplink is not one the administrator named
	// (render.UplinkAllowed).
	NotAllowed, UplinkNotAllowed error
	// Missing: it does not exist. NoMultus: the cluster does not serve Multus' API.
	Missing, NoMultus bool
}

// VMIOf is the VMI of the crawler's VM that its readiness is judged on: vmi when the VM
// controls it, and also while it passes from the crawler to the VM at an upgrade (a bare
// VMI of an earlier release: controlled by the crawler, or released, with no controller
// and the crawler an owner, as the VM is created; a cache may show either): KubeVirt's VM
// controller adopts it at its next sync, and meanwhile it runs as it ran, so the adoption
// is no outage (adopting is then true). A VMI another object controls is not its VM's:
// nil.
func VMIOf(vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance, crawler types.UID) (own *kubevirtv1.VirtualMachineInstance, adopting bool) {
	if vm == nil || vmi == nil {
		return nil, false
	}
	if metav1.IsControlledBy(vmi, vm) {
		return vmi, false
	}
	if c := metav1.GetControllerOf(vmi); c != nil && c.UID != crawler {
		return nil, false
	}
	for _, ref := range vmi.OwnerReferences {
		if ref.UID == crawler {
			return vmi, true
		}
	}
	return nil, false
}

// Check is one step of the chain: its verdict, when it applies to s.
type Check func(s Scope) (Verdict, bool)

// Chain is the order the checks are asked in: the first that applies decides.
var Chain = []Check{NodeLost, Phase, CrashLoop, Stopped, Deleting, Waiting}

// Judge is the verdict of the first check of Chain that applies.
func Judge(s Scope) Verdict {
	for _, c := range Chain {
		if v, ok := c(s); ok {
			return v
		}
	}
	return Verdict{Reason: isov1.ReasonVMIPending, Message: "waiting for KubeVirt"}
}

// NodeLost: the VMI's node has not been ready for the grace; the crawler is presumed down
// whatever KubeVirt reports of its VMI, and stays so until someone fences the node (stuck).
func NodeLost(s Scope) (Verdict, bool) {
	n := s.Node
	if !n.Lost {
		return Verdict{}, false
	}
	if n.Fenced {
		return Verdict{Reason: isov1.ReasonNodeLost, Message: n.Why + ": isochron starts the crawler on another node"}, true
	}
	return Verdict{Reason: isov1.ReasonNodeLost, Stuck: true, Message: n.Why + ": the crawler is presumed down. isochron starts it on another node once the node is fenced (taint it node.kubernetes.io/out-of-service=nodeshutdown:NoExecute, or delete the Node, once it is known to be off; Node Health Check with a fence agent does it in seconds; docs/availability.md), never before: two copies of a crawler must never run at once"}, true
}

// Deleting: the VMI is being deleted; KubeVirt starts the next one (runStrategy Always).
func Deleting(s Scope) (Verdict, bool) {
	if s.VMI == nil || s.VMI.DeletionTimestamp.IsZero() {
		return Verdict{}, false
	}
	return Verdict{Reason: isov1.ReasonVMIFailed, Message: fmt.Sprintf("VMI %s is being deleted; KubeVirt starts a new one (runStrategy Always)", s.VMI.Name)}, true
}

// Phase: what KubeVirt reports of a VMI that is not being deleted: Running is Ready; a
// failed or stopped one is restarted by KubeVirt; one on its way is pending, unless
// kube-scheduler refuses its launcher (Unschedulable).
func Phase(s Scope) (Verdict, bool) {
	vmi := s.VMI
	if vmi == nil || !vmi.DeletionTimestamp.IsZero() {
		return Verdict{}, false
	}
	switch vmi.Status.Phase {
	case kubevirtv1.Running:
		return Verdict{OK: true, Reason: isov1.ReasonVMIRunning, Message: fmt.Sprintf("VMI %s runs on node %s", vmi.Name, vmi.Status.NodeName)}, true
	case kubevirtv1.Failed, kubevirtv1.Succeeded:
		return Verdict{Reason: isov1.ReasonVMIFailed, Message: fmt.Sprintf("VMI %s %s; KubeVirt starts a new one (runStrategy Always)", vmi.Name, strings.ToLower(string(vmi.Status.Phase)))}, true
	}
	if v, ok := LauncherRefused(s); ok {
		return v, true
	}
	if v, ok := Unschedulable(s); ok {
		return v, true
	}
	if vmi.Status.Phase == "" {
		return Verdict{Reason: isov1.ReasonVMIPending, Message: fmt.Sprintf("VMI %s created, waiting for KubeVirt to schedule it", vmi.Name)}, true
	}
	return Verdict{Reason: isov1.ReasonVMIPending, Message: fmt.Sprintf("VMI %s is %s", vmi.Name, vmi.Status.Phase)}, true
}

// CrashLoop: the VM's VMIs keep failing before they run, and KubeVirt waits out its
// backoff before the next start. Stuck: the next start fails the same way unless
// something changes (isochron moves the crawler when its node is the cause).
func CrashLoop(s Scope) (Verdict, bool) {
	f := s.VM.Status.StartFailure
	if f == nil || f.ConsecutiveFailCount <= 0 || strategy(s.VM) != kubevirtv1.RunStrategyAlways {
		return Verdict{}, false
	}
	next := "soon"
	if f.RetryAfterTimestamp != nil {
		next = "at " + f.RetryAfterTimestamp.UTC().Format(time.RFC3339)
	}
	return Verdict{Reason: isov1.ReasonVMCrashLoop, Stuck: true, Message: fmt.Sprintf("the VMIs of VM %s failed %d times in a row before running (last: VMI %s); KubeVirt starts the next %s (its crash-loop backoff); kubectl get events --field-selector involvedObject.name=%s says why",
		s.VM.Name, f.ConsecutiveFailCount, f.LastFailedVMIUID, next, s.VM.Name)}, true
}

// Stopped: a person stopped the VM (virtctl stop); only virtctl start runs it again.
func Stopped(s Scope) (Verdict, bool) {
	if strategy(s.VM) != kubevirtv1.RunStrategyHalted {
		return Verdict{}, false
	}
	return Verdict{Reason: isov1.ReasonVMStopped, Stuck: true, Message: fmt.Sprintf("VM %s is stopped (runStrategy Halted, as virtctl stop sets it); virtctl start %s runs it again", s.VM.Name, s.VM.Name)}, true
}

// Unschedulable: kube-scheduler refuses the VMI's virt-launcher pod the crawler's node:
// something outside isochron took what the reservation counted on (stuck until freed).
func Unschedulable(s Scope) (Verdict, bool) {
	if s.VMI == nil {
		return Verdict{}, false
	}
	var mine []corev1.Pod
	for _, p := range s.Launchers {
		if p.Labels[kubevirtv1.CreatedByLabel] == string(s.VMI.UID) {
			mine = append(mine, p)
		}
	}
	pod, why, stuck := inventory.LauncherUnschedulable(mine)
	if !stuck {
		return Verdict{}, false
	}
	return Verdict{Reason: isov1.ReasonLauncherUnschedulable, Stuck: true, Message: fmt.Sprintf("virt-launcher pod %s of VMI %s cannot be scheduled on node %s: %s; where the node is the cause (cordoned, a taint the launcher does not tolerate, its CPUs taken) the crawler moves to another node after the manager's unschedulable grace, once; otherwise free what holds it, or change spec.placement to place the crawler elsewhere",
		pod, s.VMI.Name, s.PlacedOn, why)}, true
}

// LauncherRefused: KubeVirt cannot create the VMI's virt-launcher pod, because the API
// server refuses it (a ResourceQuota, a LimitRange, an admission policy): KubeVirt says so
// in the VMI's Synchronized condition (reason FailedCreate, the API server's words) and
// tries again. Stuck: what the namespace may run is its administrator's to change.
func LauncherRefused(s Scope) (Verdict, bool) {
	vmi := s.VMI
	if vmi == nil || vmi.Status.Phase != kubevirtv1.Pending && vmi.Status.Phase != "" {
		return Verdict{}, false
	}
	for _, p := range s.Launchers {
		if p.Labels[kubevirtv1.CreatedByLabel] == string(vmi.UID) {
			return Verdict{}, false // created: whatever refused it before admits it now
		}
	}
	for _, c := range vmi.Status.Conditions {
		if c.Type == kubevirtv1.VirtualMachineInstanceSynchronized && c.Status == corev1.ConditionFalse && c.Reason == FailedCreate {
			return Verdict{Reason: isov1.ReasonLauncherRefused, Stuck: true, Message: fmt.Sprintf("KubeVirt cannot create the virt-launcher pod of VMI %s: %s; raise the namespace's ResourceQuota or change the policy that refuses it, or the crawler's spec",
				vmi.Name, c.Message)}, true
		}
	}
	return Verdict{}, false
}

// FailedCreate is the reason of a VMI's Synchronized condition when KubeVirt could not
// create its launcher pod (KubeVirt's controller.FailedCreatePodReason).
const FailedCreate = "FailedCreate"

// Waiting: the VM exists, its VMI does not yet.
func Waiting(s Scope) (Verdict, bool) {
	return Verdict{Reason: isov1.ReasonVMIPending, Message: fmt.Sprintf("VM %s exists, waiting for KubeVirt to start its VMI", s.VM.Name)}, true
}

func strategy(vm *kubevirtv1.VirtualMachine) kubevirtv1.VirtualMachineRunStrategy {
	s, _ := vm.RunStrategy()
	return s
}

// BeforeWrite is the chain of what keeps isochron from writing the crawler's VM, asked
// before anything is written: the first that applies decides, and nothing is written.
var BeforeWrite = []Check{NetworkNotAllowed, UplinkNotAllowed, NetworkNotFound, MultusNotInstalled, Unrenderable, ForeignVM, ForeignVMI, VMIGoing}

// JudgeBeforeWrite is the verdict of the first check of BeforeWrite that applies; false
// when none does and the VM may be written.
func JudgeBeforeWrite(s Scope) (Verdict, bool) {
	for _, c := range BeforeWrite {
		if v, ok := c(s); ok {
			return v, true
		}
	}
	return Verdict{}, false
}

// NetworkNotAllowed: spec.rtNIC.networkName names another namespace's network that no
// administrator shares (stuck: the spec or the sharing must change).
func NetworkNotAllowed(s Scope) (Verdict, bool) {
	if s.Network.NotAllowed == nil {
		return Verdict{}, false
	}
	return Verdict{Reason: isov1.ReasonRTNetworkNotAllowed, Stuck: true, Message: s.Network.NotAllowed.Error()}, true
}

// UplinkNotAllowed: the RT network names a host uplink that the cluster administrator did
// not name (stuck: the network or the administrator's list must change).
func UplinkNotAllowed(s Scope) (Verdict, bool) {
	if s.Network.UplinkNotAllowed == nil {
		return Verdict{}, false
	}
	return Verdict{Reason: isov1.ReasonRTUplinkNotAllowed, Stuck: true, Message: "spec.rtNIC.networkName: " + s.Network.UplinkNotAllowed.Error()}, true
}

// NetworkNotFound: the RT network does not exist and the crawler has no VM yet (stuck
// until someone creates it). A VM that exists runs on without it (NetworkGone).
func NetworkNotFound(s Scope) (Verdict, bool) {
	if !s.Network.Missing || s.VM != nil {
		return Verdict{}, false
	}
	return Verdict{Reason: isov1.ReasonRTNetworkNotFound, Stuck: true, Message: fmt.Sprintf("spec.rtNIC.networkName: NetworkAttachmentDefinition %s not found; create it or fix the name", s.Network.Key)}, true
}

// MultusNotInstalled: the cluster does not serve Multus' API yet. Not stuck: the operator
// looks for it and starts the crawler once it is served.
func MultusNotInstalled(s Scope) (Verdict, bool) {
	if !s.Network.NoMultus {
		return Verdict{}, false
	}
	return Verdict{Reason: isov1.ReasonMultusNotInstalled, Message: fmt.Sprintf("spec.rtNIC needs Multus, and this cluster does not serve its NetworkAttachmentDefinition API (%s): install Multus, or remove spec.rtNIC; the crawler starts once the API is served", nadv1.SchemeGroupVersion)}, true
}

// Unrenderable: the VM cannot be rendered from the spec (stuck until the spec changes).
func Unrenderable(s Scope) (Verdict, bool) {
	if s.RenderErr == nil {
		return Verdict{}, false
	}
	return Verdict{Reason: isov1.ReasonInvalid, Stuck: true, Message: s.RenderErr.Error()}, true
}

// ForeignVM: a VirtualMachine of the crawler's name is someone else's (stuck until it is
// deleted or renamed).
func ForeignVM(s Scope) (Verdict, bool) {
	if s.VM == nil || isController(s.VM, s.Crawler) {
		return Verdict{}, false
	}
	return Verdict{Reason: isov1.ReasonInvalid, Stuck: true, Message: fmt.Sprintf("a VirtualMachine named %s exists and is not owned by this CrawlerVM; delete or rename it", s.VM.Name)}, true
}

// ForeignVMI: a VMI of the crawler's name exists before its VM (or beside it, still
// controlled by the crawler) and the crawler does not own it (stuck until it is deleted or
// renamed).
func ForeignVMI(s Scope) (Verdict, bool) {
	vmi := BeforeVM(s)
	if vmi == nil || hasOwner(vmi, s.Crawler) {
		return Verdict{}, false
	}
	return Verdict{Reason: isov1.ReasonInvalid, Stuck: true, Message: fmt.Sprintf("a VMI named %s exists and is not owned by this CrawlerVM; delete or rename it", vmi.Name)}, true
}

// VMIGoing: the crawler's own VMI from before its VM is being deleted: the VM waits for it.
func VMIGoing(s Scope) (Verdict, bool) {
	vmi := BeforeVM(s)
	if vmi == nil || vmi.DeletionTimestamp.IsZero() {
		return Verdict{}, false
	}
	return Progress(isov1.ReasonVMIReplacing, fmt.Sprintf("waiting for VMI %s to be deleted before starting the crawler's VM", vmi.Name)), true
}

// BeforeVM is a VMI of the crawler's name that exists before its VM (a bare VMI of an
// earlier release, or another's), or one the crawler still controls beside its VM (one a
// cache shows before its release), which isochron adopts or replaces before it writes
// the VM; nil otherwise.
func BeforeVM(s Scope) *kubevirtv1.VirtualMachineInstance {
	if s.VMI == nil || (s.VM != nil && !isController(s.VMI, s.Crawler)) {
		return nil
	}
	return s.VMI
}

func isController(o metav1.Object, uid types.UID) bool {
	c := metav1.GetControllerOf(o)
	return c != nil && c.UID == uid
}

func hasOwner(o metav1.Object, uid types.UID) bool {
	for _, ref := range o.GetOwnerReferences() {
		if ref.UID == uid {
			return true
		}
	}
	return false
}

// NetworkGone is v, the verdict on a crawler whose VM exists, told that its RT network
// was deleted since (Network.Missing): its VMI keeps the RT-NIC it was started with and
// runs on, so the verdict stands, but it cannot start again until the network is back.
func NetworkGone(v Verdict, s Scope) Verdict {
	if !s.Network.Missing {
		return v
	}
	v.Message += fmt.Sprintf("; its RT network, NetworkAttachmentDefinition %s, no longer exists: the VMI keeps its RT-NIC, but cannot start again until the network is created again", s.Network.Key)
	return v
}

// Progress is a step isochron takes towards Ready (not stuck): a VM created, a VMI
// restarting or being replaced.
func Progress(reason, message string) Verdict {
	return Verdict{Reason: reason, Message: message}
}

// NotPlaced: no node holds the crawler yet (the Placed condition says why, and is what is
// stuck).
func NotPlaced(why string) Verdict {
	return Verdict{Reason: isov1.ReasonNotPlaced, Message: "waiting for a node: " + why}
}

// Neighbour is another crawler on the same RT network, as a restart's turn is judged:
// whether it is restarting now (its VM exists and its VMI does not run yet: Ready's reason
// VMIReplacing or VMIPending), and whether a changed input waits to restart its VMI.
type Neighbour struct {
	Key          string
	Restarting   bool
	NeedsRestart bool
}

// RestartTurn says whose restart a crawler (self, its namespace/name) must wait for
// before restarting its VMI for a changed input: crawlers of one RT network restart one
// at a time, in key order, so that a change of a shared network (its binding) never
// takes every crawler on it down at once. "" when it is self's turn.
func RestartTurn(self string, neighbours []Neighbour) string {
	first := ""
	for _, n := range neighbours {
		switch {
		case n.Key == self:
			continue
		case n.Restarting:
			return n.Key
		case n.NeedsRestart && n.Key < self && (first == "" || n.Key < first):
			first = n.Key
		}
	}
	return first
}
