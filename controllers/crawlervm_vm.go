package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/inventory"
	"isochron.io/isochron/internal/readiness"
	"isochron.io/isochron/internal/render"
	"isochron.io/isochron/internal/sizing"
	"isochron.io/isochron/internal/slo"
	"isochron.io/isochron/probes/credential"
)

// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachines,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstances,verbs=get;list;watch;patch;delete
// +kubebuilder:rbac:groups=apps,resources=controllerrevisions,verbs=create
// +kubebuilder:rbac:groups="",resources=secrets,verbs=create;patch

// vmPlan is what a reconcile writes of the crawler's VM: the inputs it is rendered from,
// the VM rendered, and the crawler's world with what was found before writing, as the
// readiness chains judge it.
type vmPlan struct {
	in      render.Input
	desired *kubevirtv1.VirtualMachine
	judged  readiness.Scope
}

// runVM makes the crawler's VirtualMachine match the reservation in status and reports
// how its VMI runs: judged first (readiness.BeforeWrite: what keeps isochron from writing
// the VM), then written (writeVM), then its VMI judged (judgeVMI), which takes a move in
// progress its next step. KubeVirt starts, restarts and live-updates the VMI. The probe
// Service's error is returned once the VM is written: a Service that cannot be had does
// not hold the VMI back.
func (r *CrawlerVMReconciler) runVM(ctx context.Context, s *scope) (ctrl.Result, error) {
	w, err := s.world(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	size, ok := inventory.Resident(s.cvm)
	if !ok {
		return ctrl.Result{}, s.serviceErr
	}
	p, err := r.planVM(ctx, s, w, size.Sizing)
	if err != nil {
		return ctrl.Result{}, err
	}
	if v, stop := readiness.JudgeBeforeWrite(p.judged); stop {
		r.setReady(s, v)
		return ctrl.Result{}, s.serviceErr
	}
	s.cvm.Status.VMI = &isov1.VMIStatus{Name: p.desired.Name}
	if w.VMI != nil {
		s.cvm.Status.VMI.Phase = string(w.VMI.Status.Phase)
	}
	// The guest Secret before the VM: KubeVirt reads it when it starts a VMI.
	if err := r.applyGuestSecret(ctx, p.in); err != nil {
		return ctrl.Result{}, err
	}
	if done, err := r.writeVM(ctx, s, w, p); done || err != nil {
		return ctrl.Result{}, err
	}
	if err := r.judgeVMI(ctx, s, w, p); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, s.serviceErr
}

// planVM renders the crawler's VM from its spec, its reservation, its RT network as read
// once, and the probe agent's settings.
func (r *CrawlerVMReconciler) planVM(ctx context.Context, s *scope, w *world, size sizing.Result) (*vmPlan, error) {
	cvm := s.cvm
	p := &vmPlan{judged: w.Scope}
	p.judged.Crawler = cvm.UID
	network, binding, guestDSCP, err := s.rtNetwork(ctx)
	if err != nil {
		return nil, err
	}
	p.judged.Network = network
	p.in = render.Input{CrawlerVM: cvm, Sizing: size, Node: cvm.Status.Placement.Node, RTBinding: binding, GuestDSCP: guestDSCP,
		Agent: &render.Agent{Image: r.probes.Image, Gateways: slo.GatewayURLs(cvm, s.gatewayIP), Key: credential.Key(r.master, string(cvm.UID)), PullSecret: r.probes.PullSecret}}
	if w.VM != nil && w.VM.Spec.RunStrategy != nil {
		p.in.RunStrategy = *w.VM.Spec.RunStrategy // a person's virtctl stop holds
	}
	p.desired, p.judged.RenderErr = render.VM(p.in)
	return p, nil
}

// writeVM writes the VM as planned: a bare VMI of an earlier release first released to
// it or replaced (adoptVMI), the VM created, or applied when its inputs changed, or pinned
// to the crawler's node (render.PlanVMWrite; a VM whose RT network is gone keeps its
// template), and a VMI started while the crawler held no reservation restarted. It
// returns true when the rest waits for KubeVirt.
func (r *CrawlerVMReconciler) writeVM(ctx context.Context, s *scope, w *world, p *vmPlan) (bool, error) {
	vm, vmi := w.VM, w.VMI
	if readiness.BeforeVM(p.judged) != nil {
		if done, err := r.adoptVMI(ctx, s, vmi, p.in); done || err != nil {
			return true, err
		}
	}
	if vm == nil {
		return true, r.createVM(ctx, s, vmi, p.desired)
	}
	node := s.cvm.Status.Placement.Node
	switch render.PlanVMWrite(vm, p.in, render.Restarting(vmi)) {
	case render.WriteApply:
		if p.judged.Network.Missing {
			break // nothing to render its RT-NIC from: the template stays as it is
		}
		if err := r.applyVM(ctx, p.desired); err != nil {
			return true, err
		}
	case render.WriteAffinity:
		patch, err := render.AffinityPatch(node)
		if err != nil {
			return true, err
		}
		if err := r.Patch(ctx, vm, client.RawPatch(types.MergePatchType, patch)); err != nil {
			return true, fmt.Errorf("pinning VM %s to node %s: %w", vm.Name, node, err)
		}
	}
	return r.replaceParked(ctx, s, vmi, node)
}

// createVM creates the crawler's VM; a bare VMI of an earlier release released to it
// keeps running under it (KubeVirt adopts it; the VM is read again then).
func (r *CrawlerVMReconciler) createVM(ctx context.Context, s *scope, vmi *kubevirtv1.VirtualMachineInstance, desired *kubevirtv1.VirtualMachine) error {
	if err := r.applyVM(ctx, desired); err != nil {
		return err
	}
	cvm := s.cvm
	if vmi != nil {
		r.Recorder.Eventf(cvm, corev1.EventTypeNormal, isov1.EventReasonVMIAdopted, "VMI %s, created by an earlier release of isochron from the current spec, keeps running under its new VM", vmi.Name)
		return nil
	}
	r.Recorder.Eventf(cvm, corev1.EventTypeNormal, isov1.EventReasonVMICreated, "Created VM %s on node %s", desired.Name, cvm.Status.Placement.Node)
	r.setReady(s, readiness.Progress(isov1.ReasonVMIPending, fmt.Sprintf("VM %s created, waiting for KubeVirt to start its VMI", desired.Name)))
	return nil
}

// judgeVMI judges the VM's VMI (readiness.Judge) and keeps it current: an adopted VMI
// gets the start revision KubeVirt keeps for the VMIs it starts, a VMI started from other
// inputs that KubeVirt cannot apply live restarts (one crawler of an RT network at a
// time: restartForInputs), and a move in progress takes its next step (carryOutMove). The
// VMI is the scope's running one when the verdict is Ready.
func (r *CrawlerVMReconciler) judgeVMI(ctx context.Context, s *scope, w *world, p *vmPlan) error {
	vm, vmi := w.VM, w.VMI
	judged := p.judged
	var adopting bool
	judged.VMI, adopting = readiness.VMIOf(vm, vmi, s.cvm.UID)
	if adopting {
		// Released to its VM at an upgrade: KubeVirt's VM controller adopts it at its next
		// sync (the VM is read again then); it runs as it ran meanwhile.
		v := readiness.Judge(judged)
		r.setReady(s, v)
		if v.OK {
			s.running = vmi
		}
		return nil
	}
	if judged.VMI != nil && vmi.Status.VirtualMachineRevisionName == "" {
		if err := r.recordStartRevision(ctx, vm, vmi); err != nil {
			return err
		}
	}
	waitFor := ""
	if judged.VMI != nil && restartForInputs(vm, vmi) {
		restarted, turn, err := r.restartVMI(ctx, s, vmi)
		if restarted || err != nil {
			return err
		}
		waitFor = turn
	}
	v := readiness.NetworkGone(readiness.Judge(judged), judged)
	if waitFor != "" {
		v.Message += fmt.Sprintf("; a changed input waits to restart VMI %s until %s, on the same RT network, has restarted (one crawler of a network restarts at a time)", vmi.Name, waitFor)
		s.retryAfter(restartTurnEvery)
	}
	r.setReady(s, v)
	if err := r.carryOutMove(ctx, s, vm, judged.VMI); err != nil {
		return err
	}
	if v.OK {
		s.running = vmi
	}
	return nil
}

// setReady makes verdict v the Ready condition, keeps whether it is stuck for the
// kstatus conditions (setProgress), and records an Event when it turns to a reason worth
// one: the VMI runs, or it stopped running for a reason KubeVirt does not fix by itself.
func (r *CrawlerVMReconciler) setReady(s *scope, v readiness.Verdict) {
	cvm := s.cvm
	prev := apimeta.FindStatusCondition(cvm.Status.Conditions, isov1.ConditionReady)
	changed := prev == nil || prev.Reason != v.Reason || (prev.Status == metav1.ConditionTrue) != v.OK
	setCondition(cvm, isov1.ConditionReady, v.OK, v.Reason, v.Message)
	s.readyStuck = &v.Stuck
	// An outage begins or ends with Ready, in the same status write.
	r.trackOutage(s)
	if !changed {
		return
	}
	// Once the status is written: a write that loses a conflict finds Ready unchanged
	// next time, and the Event would be told twice.
	switch {
	case v.OK:
		s.event(cvm, corev1.EventTypeNormal, v.Reason, v.Message)
	case v.Stuck || v.Reason == isov1.ReasonVMIFailed:
		s.event(cvm, corev1.EventTypeWarning, v.Reason, v.Message)
	}
}

// applyVM writes the VM isochron renders with server-side apply, as its one field owner:
// fields KubeVirt writes into the VM (firmware UUID and serial, machine type) stay
// KubeVirt's.
func (r *CrawlerVMReconciler) applyVM(ctx context.Context, vm *kubevirtv1.VirtualMachine) error {
	u, err := render.Unstructured(vm)
	if err != nil {
		return err
	}
	if err := r.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying VM %s: %w", vm.Name, err)
	}
	return nil
}

// applyGuestSecret writes the crawler's guest Secret (render.GuestSecret) with
// server-side apply when what isochron renders for it differs from what this process
// last applied: the manager may create and patch Secrets but not read them, so it keeps
// the hash of what it applied (one apply per crawler after a restart, none in a steady
// cluster).
func (r *CrawlerVMReconciler) applyGuestSecret(ctx context.Context, in render.Input) error {
	secret, err := render.GuestSecret(in)
	if err != nil || secret == nil {
		return err
	}
	u, err := render.Unstructured(secret)
	if err != nil {
		return err
	}
	b, err := json.Marshal(u.Object)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(b)
	key := in.CrawlerVM.Namespace + "/" + in.CrawlerVM.Name
	if r.guestSecrets.applied(key, sum) {
		return nil
	}
	if err := r.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying guest Secret %s: %w", secret.Name, err)
	}
	r.guestSecrets.remember(key, sum)
	return nil
}

// appliedSecrets remembers, per crawler (namespace/name), the hash of the guest Secret
// last applied.
type appliedSecrets struct {
	mu   sync.Mutex
	sums map[string][32]byte
}

func (a *appliedSecrets) applied(key string, sum [32]byte) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	have, ok := a.sums[key]
	return ok && have == sum
}

func (a *appliedSecrets) remember(key string, sum [32]byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.sums == nil {
		a.sums = map[string][32]byte{}
	}
	a.sums[key] = sum
}

func (a *appliedSecrets) forget(key string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.sums, key)
}
