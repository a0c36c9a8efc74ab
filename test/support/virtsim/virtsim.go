// Package virtsim plays, on a real API server, the parts of KubeVirt v1.8 that isochron's
// VMs depend on and that no envtest runs: virt-controller's VM controller (starting,
// restarting and adopting VMIs, RestartRequired, LiveUpdate of affinity), its migration
// controller with the virt-handlers of both nodes (a VirtualMachineInstanceMigration
// moving a VMI to another node), virt-api's eviction admitter for evictionStrategy
// External (Evict) and its migration admission (WithAdmission: admission.go). Each step names the KubeVirt v1.8.4 code it mirrors, so that a
// difference from KubeVirt is a defect of this package. What it does not play: pods
// (no launcher pods are created; tests create the ones they need), guests, and the VMI
// phases before Running (tests report them with kubelet.SetVMIPhase, as virt-handler).
package virtsim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Outcome is how a migration the simulator runs ends.
type Outcome int

const (
	// Complete: the VMI runs on the target node (the default).
	Complete Outcome = iota
	// Fail: the migration fails (virt-handler reports failed), the VMI stays on its node.
	Fail
	// Hold: the migration stays Running until the test decides otherwise (SetOutcome).
	Hold
)

// Sim is a running simulation of KubeVirt's controllers.
type Sim struct {
	c      client.Client
	reader client.Reader
	cancel context.CancelFunc
	done   chan error

	mu sync.Mutex
	// outcome decides how each migration ends; Complete when nil.
	outcome func(*kubevirtv1.VirtualMachineInstanceMigration) Outcome
	// unschedulable is how long a migration whose target pod cannot be scheduled waits
	// before it fails (KubeVirt: 5 minutes, migration.go
	// defaultUnschedulablePendingTimeoutSeconds); 0 fails it at once.
	unschedulable time.Duration
	// adoptionHeld keeps the VM controller from adopting VMIs (HoldAdoption).
	adoptionHeld bool
}

// Start runs the simulation against the API server of cfg until Stop.
func Start(cfg *rest.Config, scheme *runtime.Scheme, opts ...Option) (*Sim, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		return nil, fmt.Errorf("starting the KubeVirt simulation: %w", err)
	}
	s := &Sim{c: mgr.GetClient(), reader: mgr.GetAPIReader(), done: make(chan error, 1), unschedulable: 5 * time.Minute}
	if o.admission != nil {
		if err := mgr.Add(s.webhookServer(o.admission)); err != nil {
			return nil, err
		}
	}
	byName := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(o)}}
	})
	copts := controller.Options{SkipNameValidation: ptr.To(true)}
	if err := ctrl.NewControllerManagedBy(mgr).Named("virtsim-vm").WithOptions(copts).
		For(&kubevirtv1.VirtualMachine{}).
		Watches(&kubevirtv1.VirtualMachineInstance{}, byName). // a VMI is its VM's by name (vm.go getMatchingControllers)
		Complete(reconcile.Func(s.syncVM)); err != nil {
		return nil, err
	}
	if err := ctrl.NewControllerManagedBy(mgr).Named("virtsim-migration").WithOptions(copts).
		For(&kubevirtv1.VirtualMachineInstanceMigration{}).
		Complete(reconcile.Func(s.syncMigration)); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() { s.done <- mgr.Start(ctx) }()
	return s, nil
}

// Stop ends the simulation.
func (s *Sim) Stop() {
	s.cancel()
	if err := <-s.done; err != nil {
		fmt.Fprintf(os.Stderr, "KubeVirt simulation: %v\n", err)
	}
}

// SetOutcome decides how the migrations that end from now on end (nil: they complete).
func (s *Sim) SetOutcome(f func(*kubevirtv1.VirtualMachineInstanceMigration) Outcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.outcome = f
}

// SetUnschedulableTimeout is how long a migration whose target cannot be scheduled
// waits before it fails.
func (s *Sim) SetUnschedulableTimeout(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unschedulable = d
}

// HoldAdoption keeps the VM controller from adopting a VMI without a controller (true)
// until it is let (false): the time between a VM's creation and the VM controller's
// first sync of it, made as long as a test needs.
func (s *Sim) HoldAdoption(hold bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.adoptionHeld = hold
}

func (s *Sim) adoptionIsHeld() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.adoptionHeld
}

// errAdoptionHeld ends a sync of a VM whose VMI waits for adoption (HoldAdoption).
var errAdoptionHeld = errors.New("adoption held")

// Evict is a pod eviction of the VMI's launcher, as virt-api's eviction admitter takes it
// for evictionStrategy External (pod-eviction-admitter.go admitLauncherPod): the VMI is
// marked for evacuation (status.evacuationNodeName, the EvictionRequested condition) and
// the eviction is refused with 429, which kubectl drain retries. It returns the error the
// eviction gets.
func (s *Sim) Evict(ctx context.Context, key client.ObjectKey) error {
	vmi := &kubevirtv1.VirtualMachineInstance{}
	if err := s.reader.Get(ctx, key, vmi); err != nil {
		return err
	}
	strategy := vmi.Spec.EvictionStrategy
	if strategy == nil || *strategy != kubevirtv1.EvictionStrategyExternal {
		return nil // None: the eviction goes through; the caller deletes the pod
	}
	if vmi.Status.EvacuationNodeName == "" {
		patch := client.MergeFrom(vmi.DeepCopy())
		vmi.Status.EvacuationNodeName = vmi.Status.NodeName
		setVMICondition(vmi, kubevirtv1.VirtualMachineInstanceConditionType("EvictionRequested"), "EvictionRequested", "VMI is marked for eviction")
		if err := s.c.Patch(ctx, vmi, patch); err != nil {
			return err
		}
	}
	return apierrors.NewTooManyRequests(fmt.Sprintf("Eviction triggered evacuation of VMI %q", key), 0)
}

// --- the VM controller (pkg/virt-controller/watch/vm/vm.go) ---------------------------

// errEmptyName is what client-go answers a Get of an empty name with (rest.Request.Name):
// KubeVirt's VM controller asks for the VMI's start revision by name, and an adopted VMI
// has none (vm.go conditionallyBumpGenerationAnnotationOnVmi, getControllerRevision).
var errEmptyName = errors.New("resource name may not be empty")

func (s *Sim) syncVM(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	vm := &kubevirtv1.VirtualMachine{}
	if err := s.reader.Get(ctx, req.NamespacedName, vm); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !vm.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil // the garbage collector deletes its VMI
	}
	vmi, err := s.claim(ctx, vm)
	if errors.Is(err, errAdoptionHeld) {
		return reconcile.Result{RequeueAfter: 100 * time.Millisecond}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	// vm.go sync: conditionallyBumpGenerationAnnotationOnVmi returns before anything else.
	if vmi != nil {
		if err := s.bumpGeneration(ctx, vm, vmi); err != nil {
			return reconcile.Result{}, err
		}
	}
	status := vm.Status.DeepCopy()
	after, err := s.syncRunStrategy(ctx, vm, vmi, status)
	if err != nil {
		return reconcile.Result{}, err
	}
	if vmi != nil && vmi.DeletionTimestamp.IsZero() {
		restart, err := s.restartRequired(ctx, vm, vmi)
		if err != nil {
			return reconcile.Result{}, err
		}
		setVMCondition(status, kubevirtv1.VirtualMachineRestartRequired, restart, "", "a non-live-updatable field was changed in the template spec")
		// vm.go sync: live updates only under LiveUpdate (the default) and without
		// RestartRequired.
		if !restart {
			if err := s.liveUpdate(ctx, vm, vmi, status); err != nil {
				return reconcile.Result{}, err
			}
		}
	}
	s.setStatus(vm, vmi, status)
	if !equality.Semantic.DeepEqual(&vm.Status, status) {
		vm.Status = *status
		if err := s.c.Status().Update(ctx, vm); err != nil {
			return reconcile.Result{}, err
		}
	}
	return reconcile.Result{RequeueAfter: after}, nil
}

// claim is ClaimVirtualMachineInstanceByName (controller_ref_manager.go): the VMI of the
// VM's name, adopted when it has no controller (AdoptVirtualMachineInstance, a merge
// patch that replaces the owner references), nil when another object controls it.
func (s *Sim) claim(ctx context.Context, vm *kubevirtv1.VirtualMachine) (*kubevirtv1.VirtualMachineInstance, error) {
	vmi := &kubevirtv1.VirtualMachineInstance{}
	if err := s.reader.Get(ctx, client.ObjectKeyFromObject(vm), vmi); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	owner := metav1.GetControllerOf(vmi)
	switch {
	case owner != nil && owner.UID == vm.UID:
		return vmi, nil
	case owner != nil || !vmi.DeletionTimestamp.IsZero():
		return nil, nil
	case s.adoptionIsHeld():
		return nil, errAdoptionHeld
	}
	ref := metav1.NewControllerRef(vm, kubevirtv1.VirtualMachineGroupVersionKind)
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"ownerReferences": []metav1.OwnerReference{*ref}, "uid": vmi.UID}})
	if err != nil {
		return nil, err
	}
	if err := s.c.Patch(ctx, vmi, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return nil, fmt.Errorf("adopting VMI %s: %w", vmi.Name, err)
	}
	return vmi, nil
}

// bumpGeneration is conditionallyBumpGenerationAnnotationOnVmi.
func (s *Sim) bumpGeneration(ctx context.Context, vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance) error {
	if vmi.Annotations[kubevirtv1.VirtualMachineGenerationAnnotation] == strconv.FormatInt(vm.Generation, 10) {
		return nil
	}
	name := vmi.Status.VirtualMachineRevisionName
	if name == "" {
		return fmt.Errorf("syncing VM %s: %w", vm.Name, errEmptyName)
	}
	rev := &appsv1.ControllerRevision{}
	if err := s.reader.Get(ctx, client.ObjectKey{Namespace: vm.Namespace, Name: name}, rev); err != nil {
		return client.IgnoreNotFound(err)
	}
	spec, err := revisionSpec(rev)
	if err != nil {
		return err
	}
	if !equality.Semantic.DeepEqual(spec.Template, vm.Spec.Template) {
		return nil
	}
	patch := client.MergeFrom(vmi.DeepCopy())
	if vmi.Annotations == nil {
		vmi.Annotations = map[string]string{}
	}
	vmi.Annotations[kubevirtv1.VirtualMachineGenerationAnnotation] = strconv.FormatInt(vm.Generation, 10)
	return s.c.Patch(ctx, vmi, patch)
}

// syncRunStrategy is the VM controller's runStrategy handling, for Always and Halted
// (the strategies isochron uses: Always, and Halted after `virtctl stop`). It returns
// when to look again while a start waits out the crash-loop backoff.
func (s *Sim) syncRunStrategy(ctx context.Context, vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance, status *kubevirtv1.VirtualMachineStatus) (time.Duration, error) {
	strategy, err := vm.RunStrategy()
	if err != nil {
		return 0, err
	}
	if vmi != nil && !vmi.DeletionTimestamp.IsZero() {
		return 0, nil // stopping: wait until it is gone
	}
	switch strategy {
	case kubevirtv1.RunStrategyHalted:
		if vmi != nil {
			return 0, s.c.Delete(ctx, vmi, client.Preconditions{UID: &vmi.UID}) // stopVMI
		}
		status.StartFailure = nil // shouldClearStartFailure
		return 0, nil
	case kubevirtv1.RunStrategyAlways:
	default:
		return 0, fmt.Errorf("virtsim plays runStrategy Always and Halted, not %s", strategy)
	}
	if vmi != nil {
		if !vmi.IsFinal() {
			if ranOnce(vmi) {
				status.StartFailure = nil // shouldClearStartFailure
			}
			return 0, nil
		}
		// syncStartFailureStatus: a VMI that failed before it ever ran counts towards the
		// crash-loop backoff (calculateStartBackoffTime: 10 s x n^2, at most 300 s; no
		// jitter here).
		if !ranOnce(vmi) {
			n := 1
			if f := status.StartFailure; f != nil {
				n = f.ConsecutiveFailCount + 1
			}
			delay := min(time.Duration(10*n*n)*time.Second, 300*time.Second)
			status.StartFailure = &kubevirtv1.VirtualMachineStartFailure{
				ConsecutiveFailCount: n, LastFailedVMIUID: vmi.UID,
				RetryAfterTimestamp: ptr.To(metav1.NewTime(time.Now().Add(delay))),
			}
		} else {
			status.StartFailure = nil
		}
		return 0, s.c.Delete(ctx, vmi, client.Preconditions{UID: &vmi.UID}) // stopVMI
	}
	// startFailureBackoffTimeLeft
	if f := status.StartFailure; f != nil && f.RetryAfterTimestamp != nil {
		if left := time.Until(f.RetryAfterTimestamp.Time); left > 0 {
			return left, nil
		}
	}
	return 0, s.startVMI(ctx, vm)
}

// ranOnce is wasVMIInRunningPhase.
func ranOnce(vmi *kubevirtv1.VirtualMachineInstance) bool {
	for _, t := range vmi.Status.PhaseTransitionTimestamps {
		if t.Phase == kubevirtv1.Running {
			return true
		}
	}
	return vmi.Status.Phase == kubevirtv1.Running
}

// startVMI creates the VM's start revision (createVMRevision) and the VMI from its
// template (SetupVMIFromVM), annotated with the VM's generation.
func (s *Sim) startVMI(ctx context.Context, vm *kubevirtv1.VirtualMachine) error {
	name, err := s.createRevision(ctx, vm)
	if err != nil {
		return err
	}
	vmi := &kubevirtv1.VirtualMachineInstance{}
	vmi.ObjectMeta = *vm.Spec.Template.ObjectMeta.DeepCopy()
	vmi.Name, vmi.Namespace = vm.Name, vm.Namespace
	vmi.Spec = *vm.Spec.Template.Spec.DeepCopy()
	vmi.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(vm, kubevirtv1.VirtualMachineGroupVersionKind)}
	if vmi.Annotations == nil {
		vmi.Annotations = map[string]string{}
	}
	vmi.Annotations[kubevirtv1.VirtualMachineGenerationAnnotation] = strconv.FormatInt(vm.Generation, 10)
	vmi.Status.VirtualMachineRevisionName = name
	if err := s.c.Create(ctx, vmi); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil // another object's VMI of this name: KubeVirt reports FailedCreate
		}
		return fmt.Errorf("starting VM %s: %w", vm.Name, err)
	}
	return nil
}

// RevisionName is the name KubeVirt gives a VM's start revision (vm.go getVMRevisionName).
func RevisionName(vmUID types.UID, generation int64) string {
	return fmt.Sprintf("revision-start-vm-%s-%d", vmUID, generation)
}

// createRevision is createVMRevision: the VM's spec at start, owned by the VM, older ones
// of the VM deleted (deleteOlderVMRevision).
func (s *Sim) createRevision(ctx context.Context, vm *kubevirtv1.VirtualMachine) (string, error) {
	name := RevisionName(vm.UID, vm.Generation)
	revs, err := s.revisionsOf(ctx, vm)
	if err != nil {
		return "", err
	}
	for i := range revs {
		if revs[i].Name == name {
			return name, nil
		}
		if err := s.c.Delete(ctx, &revs[i]); client.IgnoreNotFound(err) != nil {
			return "", err
		}
	}
	data, err := json.Marshal(map[string]any{"spec": vm.Spec})
	if err != nil {
		return "", err
	}
	rev := &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: vm.Namespace,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vm, kubevirtv1.VirtualMachineGroupVersionKind)}},
		Data:     runtime.RawExtension{Raw: data},
		Revision: vm.Generation,
	}
	if err := s.c.Create(ctx, rev); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	return name, nil
}

// revisionsOf are the VM's start revisions (the informer index "vm" on the owner's UID).
func (s *Sim) revisionsOf(ctx context.Context, vm *kubevirtv1.VirtualMachine) ([]appsv1.ControllerRevision, error) {
	list := &appsv1.ControllerRevisionList{}
	if err := s.reader.List(ctx, list, client.InNamespace(vm.Namespace)); err != nil {
		return nil, err
	}
	var out []appsv1.ControllerRevision
	for _, r := range list.Items {
		if metav1.IsControlledBy(&r, vm) && strings.HasPrefix(r.Name, "revision-start-vm-"+string(vm.UID)) {
			out = append(out, r)
		}
	}
	return out, nil
}

func revisionSpec(rev *appsv1.ControllerRevision) (*kubevirtv1.VirtualMachineSpec, error) {
	var data struct {
		Spec kubevirtv1.VirtualMachineSpec `json:"spec"`
	}
	if err := json.Unmarshal(rev.Data.Raw, &data); err != nil {
		return nil, fmt.Errorf("reading revision %s: %w", rev.Name, err)
	}
	return &data.Spec, nil
}

// restartRequired is syncRestartRequired: the template spec of the VM's last start
// revision against the VM's, with the live-updatable fields of a VM without instance
// types (node selector, affinity, tolerations, CPU sockets, guest memory) left out. No
// revision (an adopted VMI): no restart required.
func (s *Sim) restartRequired(ctx context.Context, vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance) (bool, error) {
	revs, err := s.revisionsOf(ctx, vm)
	if err != nil || len(revs) == 0 {
		return false, err
	}
	last := &revs[0]
	for i := range revs {
		if revs[i].Revision > last.Revision {
			last = &revs[i]
		}
	}
	spec, err := revisionSpec(last)
	if err != nil {
		return false, err
	}
	seen, now := spec.Template.Spec.DeepCopy(), vm.Spec.Template.Spec.DeepCopy()
	seen.NodeSelector, seen.Affinity, seen.Tolerations = now.NodeSelector, now.Affinity, now.Tolerations
	if seen.Domain.CPU != nil && now.Domain.CPU != nil {
		seen.Domain.CPU.Sockets = now.Domain.CPU.Sockets
	}
	return !equality.Semantic.DeepEqual(seen, now), nil
}

// liveUpdate is handleAffinityChangeRequest and handleTolerationsChangeRequest: the
// template's node selector, affinity and tolerations patched onto the running VMI, refused
// while it migrates (reason AffinityChangeError on the Failure condition).
func (s *Sim) liveUpdate(ctx context.Context, vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance, status *kubevirtv1.VirtualMachineStatus) error {
	want := &vm.Spec.Template.Spec
	if equality.Semantic.DeepEqual(want.NodeSelector, vmi.Spec.NodeSelector) && equality.Semantic.DeepEqual(want.Affinity, vmi.Spec.Affinity) &&
		equality.Semantic.DeepEqual(want.Tolerations, vmi.Spec.Tolerations) {
		setVMCondition(status, kubevirtv1.VirtualMachineFailure, false, "", "")
		return nil
	}
	if migrating(vmi) {
		setVMCondition(status, kubevirtv1.VirtualMachineFailure, true, "AffinityChangeError", "Node affinity should not be changed during VMI migration")
		return nil
	}
	patch := client.MergeFrom(vmi.DeepCopy())
	vmi.Spec.NodeSelector, vmi.Spec.Affinity, vmi.Spec.Tolerations = want.NodeSelector, want.Affinity, want.Tolerations
	return s.c.Patch(ctx, vmi, patch)
}

// migrating is migrations.IsMigrating: a migration started and not ended.
func migrating(vmi *kubevirtv1.VirtualMachineInstance) bool {
	m := vmi.Status.MigrationState
	return m != nil && m.StartTimestamp != nil && m.EndTimestamp == nil
}

// setStatus is updateStatus: created, ready, printableStatus (setPrintableStatus, in its
// order) and the VMI's conditions other than Ready copied onto the VM (syncConditions).
func (s *Sim) setStatus(vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance, status *kubevirtv1.VirtualMachineStatus) {
	strategy, _ := vm.RunStrategy()
	status.RunStrategy = strategy
	status.Created = vmi != nil
	status.Ready = vmi != nil && vmi.Status.Phase == kubevirtv1.Running && vmi.DeletionTimestamp.IsZero()
	var keep []kubevirtv1.VirtualMachineCondition
	for _, c := range status.Conditions {
		switch c.Type {
		case kubevirtv1.VirtualMachineFailure, kubevirtv1.VirtualMachineRestartRequired:
			keep = append(keep, c)
		}
	}
	if vmi != nil {
		for _, c := range vmi.Status.Conditions {
			if c.Type != kubevirtv1.VirtualMachineInstanceReady {
				keep = append(keep, kubevirtv1.VirtualMachineCondition{Type: kubevirtv1.VirtualMachineConditionType(c.Type), Status: c.Status, Reason: c.Reason, Message: c.Message})
			}
		}
	}
	status.Conditions = keep
	switch {
	case vmi != nil && !vmi.DeletionTimestamp.IsZero():
		status.PrintableStatus = kubevirtv1.VirtualMachineStatusStopping
	case vmi != nil && migrating(vmi):
		status.PrintableStatus = kubevirtv1.VirtualMachineStatusMigrating
	case vmi != nil && vmi.Status.Phase == kubevirtv1.Running:
		status.PrintableStatus = kubevirtv1.VirtualMachineStatusRunning
	case (vmi == nil || vmi.IsFinal()) && status.StartFailure != nil && status.StartFailure.ConsecutiveFailCount > 0 && strategy == kubevirtv1.RunStrategyAlways:
		status.PrintableStatus = kubevirtv1.VirtualMachineStatusCrashLoopBackOff
	case vmi != nil:
		status.PrintableStatus = kubevirtv1.VirtualMachineStatusStarting
	default:
		status.PrintableStatus = kubevirtv1.VirtualMachineStatusStopped
	}
}

func setVMCondition(status *kubevirtv1.VirtualMachineStatus, typ kubevirtv1.VirtualMachineConditionType, on bool, reason, message string) {
	out := status.Conditions[:0]
	for _, c := range status.Conditions {
		if c.Type != typ {
			out = append(out, c)
		}
	}
	if on {
		out = append(out, kubevirtv1.VirtualMachineCondition{Type: typ, Status: "True", Reason: reason, Message: message})
	}
	status.Conditions = out
}

func setVMICondition(vmi *kubevirtv1.VirtualMachineInstance, typ kubevirtv1.VirtualMachineInstanceConditionType, reason, message string) {
	for i := range vmi.Status.Conditions {
		if vmi.Status.Conditions[i].Type == typ {
			vmi.Status.Conditions[i] = kubevirtv1.VirtualMachineInstanceCondition{Type: typ, Status: "True", Reason: reason, Message: message}
			return
		}
	}
	vmi.Status.Conditions = append(vmi.Status.Conditions, kubevirtv1.VirtualMachineInstanceCondition{Type: typ, Status: "True", Reason: reason, Message: message})
}

// --- the migration controller (pkg/virt-controller/watch/migration/migration.go) and the
// virt-handlers of the source and target nodes ---------------------------------------

// migrationFinalizer is what virt-api's migration mutator adds to every migration
// (migration-create-mutator.go), so that an aborted migration is seen before it goes.
const migrationFinalizer = "kubevirt.io/migrationJobFinalize"

func (s *Sim) syncMigration(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	mig := &kubevirtv1.VirtualMachineInstanceMigration{}
	if err := s.reader.Get(ctx, req.NamespacedName, mig); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	final := mig.Status.Phase == kubevirtv1.MigrationSucceeded || mig.Status.Phase == kubevirtv1.MigrationFailed
	if final {
		return reconcile.Result{}, s.dropFinalizer(ctx, mig)
	}
	if mig.DeletionTimestamp.IsZero() && !hasString(mig.Finalizers, migrationFinalizer) {
		patch := client.MergeFrom(mig.DeepCopy())
		mig.Finalizers = append(mig.Finalizers, migrationFinalizer)
		return reconcile.Result{}, s.c.Patch(ctx, mig, patch)
	}
	vmi := &kubevirtv1.VirtualMachineInstance{}
	if err := s.reader.Get(ctx, client.ObjectKey{Namespace: mig.Namespace, Name: mig.Spec.VMIName}, vmi); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, s.failMigration(ctx, mig, nil, "the VMI does not exist")
		}
		return reconcile.Result{}, err
	}
	state := vmi.Status.MigrationState
	handedOff := state != nil && state.MigrationUID == mig.UID
	if !mig.DeletionTimestamp.IsZero() {
		// An abort: before the hand-off the target pod goes (handlePreHandoffMigrationCancel);
		// after it, virt-handler aborts the migration (markMigrationAbortInVmiStatus).
		return reconcile.Result{}, s.failMigration(ctx, mig, vmi, "aborted: the migration was deleted")
	}
	if !handedOff {
		// canMigrateVMI: another migration of the VMI in flight fails this one.
		if state != nil && state.MigrationUID != "" && !state.Completed && !state.Failed {
			return reconcile.Result{}, s.failMigration(ctx, mig, nil, "VMI is not eligible for migration because another migration job is in progress.")
		}
		if vmi.Status.Phase != kubevirtv1.Running || !vmi.DeletionTimestamp.IsZero() {
			return reconcile.Result{}, s.failMigration(ctx, mig, nil, "Cannot migrate VMI in finalized state.")
		}
		target, why, err := s.targetNode(ctx, mig, vmi)
		if err != nil {
			return reconcile.Result{}, err
		}
		if target == "" {
			// The target pod stays Pending (kube-scheduler cannot place it) until the
			// unschedulable timeout fails the migration.
			s.mu.Lock()
			wait := s.unschedulable
			s.mu.Unlock()
			if left := time.Until(mig.CreationTimestamp.Add(wait)); left > 0 {
				if err := s.setMigrationPhase(ctx, mig, kubevirtv1.MigrationScheduling); err != nil {
					return reconcile.Result{}, err
				}
				return reconcile.Result{RequeueAfter: left}, nil
			}
			return reconcile.Result{}, s.failMigration(ctx, mig, nil, "target pod is unschedulable: "+why)
		}
		// handleTargetPodHandoff, then the source virt-handler starts the transfer.
		patch := client.MergeFrom(vmi.DeepCopy())
		now := metav1.Now()
		vmi.Status.MigrationState = &kubevirtv1.VirtualMachineInstanceMigrationState{
			MigrationUID: mig.UID, SourceNode: vmi.Status.NodeName, TargetNode: target,
			StartTimestamp: &now, Mode: kubevirtv1.MigrationPreCopy,
		}
		if err := s.c.Patch(ctx, vmi, patch); err != nil {
			return reconcile.Result{}, err
		}
		// The migration's own status change brings it back to its next step.
		return reconcile.Result{}, s.setMigrationPhase(ctx, mig, kubevirtv1.MigrationRunning)
	}
	if state.Completed || state.Failed {
		return reconcile.Result{}, s.finish(ctx, mig, vmi)
	}
	s.mu.Lock()
	decide := s.outcome
	s.mu.Unlock()
	outcome := Complete
	if decide != nil {
		outcome = decide(mig)
	}
	switch outcome {
	case Hold:
		return reconcile.Result{RequeueAfter: 100 * time.Millisecond}, nil
	case Fail:
		return reconcile.Result{}, s.failMigration(ctx, mig, vmi, "migration failed on the source: the target did not keep up")
	}
	// The target virt-handler's ackMigrationCompletion (migration-target.go): the VMI
	// runs on the target node, and its evacuation is over.
	patch := client.MergeFrom(vmi.DeepCopy())
	now := metav1.Now()
	vmi.Status.NodeName = state.TargetNode
	vmi.Status.MigrationState.Completed = true
	vmi.Status.MigrationState.EndTimestamp = &now
	vmi.Status.EvacuationNodeName = ""
	if err := s.c.Patch(ctx, vmi, patch); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{}, s.finish(ctx, mig, vmi)
}

// targetNode is where kube-scheduler would put the migration's target pod, rendered from
// the VMI as it is now (RenderMigrationManifest: its node selector merged over the
// migration's addedNodeSelector, its affinity) with an anti-affinity to the VMI's own
// pods on their node (createMigrationPodAntiAffinityRule): a Ready, schedulable node other
// than the VMI's. "" and why when there is none.
func (s *Sim) targetNode(ctx context.Context, mig *kubevirtv1.VirtualMachineInstanceMigration, vmi *kubevirtv1.VirtualMachineInstance) (string, string, error) {
	selector := map[string]string{}
	for k, v := range mig.Spec.AddedNodeSelector {
		selector[k] = v
	}
	for k, v := range vmi.Spec.NodeSelector {
		selector[k] = v
	}
	nodes := &corev1.NodeList{}
	if err := s.reader.List(ctx, nodes); err != nil {
		return "", "", err
	}
	pinned := ""
	if a := vmi.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			for _, e := range t.MatchExpressions {
				if e.Key == corev1.LabelHostname && len(e.Values) == 1 {
					pinned = e.Values[0]
				}
			}
		}
	}
	for _, n := range nodes.Items {
		switch {
		case n.Name == vmi.Status.NodeName, pinned != "" && n.Name != pinned, n.Spec.Unschedulable, !nodeReady(&n):
			continue
		}
		fits := true
		for k, v := range selector {
			if n.Labels[k] != v {
				fits = false
			}
		}
		if fits {
			return n.Name, "", nil
		}
	}
	return "", fmt.Sprintf("no node other than %s matches the VMI's affinity (node %q) and node selector %v", vmi.Status.NodeName, pinned, selector), nil
}

// failMigration ends a migration as failed: the VMI's migration state says so (the source
// virt-handler's report) when it was handed off, and the migration's phase is Failed.
func (s *Sim) failMigration(ctx context.Context, mig *kubevirtv1.VirtualMachineInstanceMigration, vmi *kubevirtv1.VirtualMachineInstance, reason string) error {
	if vmi != nil && vmi.Status.MigrationState != nil && vmi.Status.MigrationState.MigrationUID == mig.UID {
		patch := client.MergeFrom(vmi.DeepCopy())
		now := metav1.Now()
		st := vmi.Status.MigrationState
		st.Failed, st.EndTimestamp, st.FailureReason = true, &now, reason
		if !mig.DeletionTimestamp.IsZero() {
			st.AbortRequested, st.AbortStatus = true, kubevirtv1.MigrationAbortSucceeded
		}
		if err := s.c.Patch(ctx, vmi, patch); err != nil {
			return err
		}
	}
	patch := client.MergeFrom(mig.DeepCopy())
	mig.Status.Phase = kubevirtv1.MigrationFailed
	mig.Status.PhaseTransitionTimestamps = append(mig.Status.PhaseTransitionTimestamps, kubevirtv1.VirtualMachineInstanceMigrationPhaseTransitionTimestamp{Phase: kubevirtv1.MigrationFailed, PhaseTransitionTimestamp: metav1.Now()})
	if vmi != nil && vmi.Status.MigrationState != nil {
		mig.Status.MigrationState = vmi.Status.MigrationState.DeepCopy()
	} else {
		now := metav1.Now()
		mig.Status.MigrationState = &kubevirtv1.VirtualMachineInstanceMigrationState{MigrationUID: mig.UID, Failed: true, EndTimestamp: &now, FailureReason: reason}
	}
	if err := s.c.Status().Patch(ctx, mig, patch); err != nil {
		return client.IgnoreNotFound(err)
	}
	return s.dropFinalizer(ctx, mig)
}

// finish records the end the VMI reports on the migration (migration.go updateStatus:
// Succeeded or Failed, the VMI's migration state copied).
func (s *Sim) finish(ctx context.Context, mig *kubevirtv1.VirtualMachineInstanceMigration, vmi *kubevirtv1.VirtualMachineInstance) error {
	if vmi.Status.MigrationState.Failed {
		return s.failMigration(ctx, mig, vmi, vmi.Status.MigrationState.FailureReason)
	}
	patch := client.MergeFrom(mig.DeepCopy())
	mig.Status.Phase = kubevirtv1.MigrationSucceeded
	mig.Status.PhaseTransitionTimestamps = append(mig.Status.PhaseTransitionTimestamps, kubevirtv1.VirtualMachineInstanceMigrationPhaseTransitionTimestamp{Phase: kubevirtv1.MigrationSucceeded, PhaseTransitionTimestamp: metav1.Now()})
	mig.Status.MigrationState = vmi.Status.MigrationState.DeepCopy()
	if err := s.c.Status().Patch(ctx, mig, patch); err != nil {
		return err
	}
	return s.dropFinalizer(ctx, mig)
}

func (s *Sim) setMigrationPhase(ctx context.Context, mig *kubevirtv1.VirtualMachineInstanceMigration, phase kubevirtv1.VirtualMachineInstanceMigrationPhase) error {
	if mig.Status.Phase == phase {
		return nil
	}
	patch := client.MergeFrom(mig.DeepCopy())
	mig.Status.Phase = phase
	mig.Status.PhaseTransitionTimestamps = append(mig.Status.PhaseTransitionTimestamps, kubevirtv1.VirtualMachineInstanceMigrationPhaseTransitionTimestamp{Phase: phase, PhaseTransitionTimestamp: metav1.Now()})
	return s.c.Status().Patch(ctx, mig, patch)
}

func (s *Sim) dropFinalizer(ctx context.Context, mig *kubevirtv1.VirtualMachineInstanceMigration) error {
	if !hasString(mig.Finalizers, migrationFinalizer) {
		return nil
	}
	patch := client.MergeFrom(mig.DeepCopy())
	var keep []string
	for _, f := range mig.Finalizers {
		if f != migrationFinalizer {
			keep = append(keep, f)
		}
	}
	mig.Finalizers = keep
	return client.IgnoreNotFound(s.c.Patch(ctx, mig, patch))
}

// nodeReady is the node's Ready condition (kube-scheduler's filters refuse a node tainted
// not-ready, which the node lifecycle controller does when it is not).
func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func hasString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
