package controllers

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/access"
	"isochron.io/isochron/internal/ledger"
	"isochron.io/isochron/internal/move"
	"isochron.io/isochron/internal/nodebooks"
	"isochron.io/isochron/internal/readiness"
	"isochron.io/isochron/internal/slo"
	"isochron.io/isochron/probes/credential"
)

// FieldOwner is the one field manager isochron applies with: its own name, as in its
// managed-by label and its Events.
const FieldOwner = isov1.ManagedBy

// CrawlerVMReconciler sizes, places and runs CrawlerVMs.
type CrawlerVMReconciler struct {
	client.Client
	// APIReader reads from the API server itself: the crawlers' reservations when the
	// ledger is built, and what must not be missed for being new (probe pods).
	APIReader client.Reader
	Recorder  record.EventRecorder
	// concurrency is how many crawlers reconcile at once; placement decisions among them
	// are serialised (see decide).
	concurrency int
	// probes are the probe Jobs' image and timing.
	probes slo.Options
	// clock tells the time of probe schedules, backoffs and results, and of the metrics.
	clock clock.PassiveClock
	// registry is where SetupWithManager registers the reconciler's metrics.
	registry prometheus.Registerer
	// minMoveInterval is the least time between two moves of one crawler under
	// onRefuted Replace.
	minMoveInterval time.Duration
	// refutedMemory is how long a node that refuted a crawler is kept from its moves.
	refutedMemory time.Duration
	// nodeLostGrace is how long a crawler's node may be not ready before the crawler is
	// presumed down.
	nodeLostGrace time.Duration
	// unschedulableGrace is how long a launcher may be unschedulable on the crawler's node
	// for a reason of the node before the crawler starts elsewhere.
	unschedulableGrace time.Duration
	// releaseAfter is how long a crawler may be down, stopped or with its launcher refused,
	// before its reservation is released (readiness.Release).
	releaseAfter time.Duration
	// apiPollInterval is how often an optional API the operator waits for is looked for.
	apiPollInterval time.Duration
	// sharedNetworks are the namespaces whose RT networks every namespace may use.
	sharedNetworks []string
	// rtUplinks are the host interfaces the administrator named as RT uplinks.
	rtUplinks []string
	// access says which nodes each namespace's crawlers may reach (WithNodeAccess).
	access access.Rules
	// restarts serialises the restarts of an RT network's crawlers.
	restarts restartTurns
	// master is the probe master key (LoadProbeMasterKey): each crawler's probe key and the
	// names of its probe Jobs derive from it.
	master []byte
	// guestSecrets are the guest Secrets this process applied.
	guestSecrets appliedSecrets
	// reconcileTimeout is one reconcile's deadline.
	reconcileTimeout time.Duration
	// identity is this replica's leader-election identity, written with each change of a
	// reservation (status.decidedBy) for the API server's leader fence; empty without
	// leader election.
	identity string
	// liveness tells whether the manager is wedged (Healthz).
	liveness *liveness

	metrics *metrics
	// placer decides where crawlers go and holds their reservations.
	placer *placer
}

// Option sets up a CrawlerVMReconciler (Kueue's style: WithClock and the like).
type Option func(*CrawlerVMReconciler)

// WithConcurrency reconciles up to n crawlers at once (default 1).
func WithConcurrency(n int) Option { return func(r *CrawlerVMReconciler) { r.concurrency = n } }

// WithProbes sets the probe Jobs' image and timing (default slo.DefaultOptions).
func WithProbes(o slo.Options) Option { return func(r *CrawlerVMReconciler) { r.probes = o } }

// WithClock tells the reconciler the time: tests pass a fake clock to step through
// schedules, backoffs and rate limits without sleeping.
func WithClock(c clock.PassiveClock) Option { return func(r *CrawlerVMReconciler) { r.clock = c } }

// WithMinMoveInterval sets the least time between two moves of one refuted crawler under
// spec.placement.onRefuted Replace (default slo.DefaultMinMoveInterval).
func WithMinMoveInterval(d time.Duration) Option {
	return func(r *CrawlerVMReconciler) { r.minMoveInterval = d }
}

// WithRefutedNodeMemory sets how long a node where a probe refuted a crawler's SLO is
// kept from the crawler's moves (default move.DefaultRefutedMemory).
func WithRefutedNodeMemory(d time.Duration) Option {
	return func(r *CrawlerVMReconciler) { r.refutedMemory = d }
}

// WithNodeLostGrace sets how long a crawler's node may be not ready before the crawler is
// presumed down (default move.DefaultNodeLostGrace).
func WithNodeLostGrace(d time.Duration) Option {
	return func(r *CrawlerVMReconciler) { r.nodeLostGrace = d }
}

// WithUnschedulableGrace sets how long a crawler's launcher may be unschedulable on its
// node for a reason of the node (cordoned, tainted, its CPUs taken) before the crawler
// starts on another node (default move.DefaultUnschedulableGrace).
func WithUnschedulableGrace(d time.Duration) Option {
	return func(r *CrawlerVMReconciler) { r.unschedulableGrace = d }
}

// WithReleaseAfter sets how long a crawler may be down because a person stopped it or
// the API server refuses its launcher before it gives up its reservation (default
// readiness.DefaultReleaseAfter).
func WithReleaseAfter(d time.Duration) Option {
	return func(r *CrawlerVMReconciler) { r.releaseAfter = d }
}

// WithAPIPollInterval sets how often the operator asks whether an optional API it waits
// for is served (default DefaultAPIPollInterval).
func WithAPIPollInterval(d time.Duration) Option {
	return func(r *CrawlerVMReconciler) { r.apiPollInterval = d }
}

// WithSharedNetworkNamespaces lets crawlers of every namespace use the RT networks of
// namespaces (Multus' globalNamespaces); otherwise a crawler uses only its own
// namespace's (render.NetworkAllowed).
func WithSharedNetworkNamespaces(namespaces []string) Option {
	return func(r *CrawlerVMReconciler) { r.sharedNetworks = namespaces }
}

// WithRTUplinks names the host interfaces an RT network may name as its uplink
// (render.UplinkAllowed); the NIC agents are given the same list.
func WithRTUplinks(uplinks []string) Option {
	return func(r *CrawlerVMReconciler) { r.rtUplinks = uplinks }
}

// WithNodeAccess sets the administrator's rules of which nodes each namespace's crawlers
// may reach (LoadNodeAccess); without it no namespace may tolerate a taint.
func WithNodeAccess(rules access.Rules) Option {
	return func(r *CrawlerVMReconciler) { r.access = rules }
}

// WithProbeMasterKey sets the probe master key (LoadProbeMasterKey), which every replica
// must share. Without it the reconciler draws a key of its own, good for one process: a
// test, or isochronctl.
func WithProbeMasterKey(key []byte) Option { return func(r *CrawlerVMReconciler) { r.master = key } }

// WithReconcileTimeout sets one reconcile's deadline (default DefaultReconcileTimeout).
func WithReconcileTimeout(d time.Duration) Option {
	return func(r *CrawlerVMReconciler) { r.reconcileTimeout = d }
}

// WithLeaderIdentity tells the reconciler the identity under which this replica holds
// the leader election Lease (NewLeaderLock): it writes it with every change of a
// reservation (status.decidedBy), which the API server's leader fence admits only while
// the Lease names it.
func WithLeaderIdentity(id string) Option { return func(r *CrawlerVMReconciler) { r.identity = id } }

// WithRegistry registers the reconciler's metrics on reg instead of the manager's metrics
// endpoint (controller-runtime's registry), as when a test runs several replicas in one
// process.
func WithRegistry(reg prometheus.Registerer) Option {
	return func(r *CrawlerVMReconciler) { r.registry = reg }
}

// NewCrawlerVMReconciler is the reconciler wired to mgr's clients.
func NewCrawlerVMReconciler(mgr ctrl.Manager, opts ...Option) *CrawlerVMReconciler {
	r := &CrawlerVMReconciler{
		Client:          mgr.GetClient(),
		APIReader:       mgr.GetAPIReader(),
		Recorder:        mgr.GetEventRecorderFor(isov1.ManagedBy),
		concurrency:     1,
		probes:          slo.DefaultOptions(slo.DefaultImage),
		clock:           clock.RealClock{},
		apiPollInterval: DefaultAPIPollInterval,
		registry:        ctrlmetrics.Registry,

		reconcileTimeout: DefaultReconcileTimeout,

		minMoveInterval:    slo.DefaultMinMoveInterval,
		refutedMemory:      move.DefaultRefutedMemory,
		nodeLostGrace:      move.DefaultNodeLostGrace,
		unschedulableGrace: move.DefaultUnschedulableGrace,
		releaseAfter:       readiness.DefaultReleaseAfter,
	}
	for _, o := range opts {
		o(r)
	}
	if r.master == nil {
		key, err := credential.NewKey()
		if err != nil {
			panic(err) // the system's random source failed
		}
		r.master = key
	}
	r.probes.NameKey = credential.NameKey(r.master)
	r.placer = &placer{cache: r.Client, api: r.APIReader, clock: r.clock, request: r.request, ledger: ledger.New(), books: nodebooks.New(),
		batchSize: func(float64) {}, decisionTime: func(float64) {}}
	r.liveness = &liveness{clock: r.clock, deadline: r.reconcileTimeout, lock: &r.placer.decide}
	return r
}

// Healthz is the manager's liveness check (healthz.Checker): it fails while a reconcile
// runs well past its deadline or the decision lock is held longer than a reconcile may
// take, so that the kubelet restarts a wedged manager.
func (r *CrawlerVMReconciler) Healthz(req *http.Request) error { return r.liveness.Healthz(req) }

// +kubebuilder:rbac:groups=isochron.io,resources=crawlervms,verbs=get;list;watch
// +kubebuilder:rbac:groups=isochron.io,resources=crawlervms/status,verbs=patch
// +kubebuilder:rbac:groups=k8s.cni.cncf.io,resources=network-attachment-definitions,verbs=get;list;watch
// +kubebuilder:rbac:groups=kubevirt.io,resources=kubevirts,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=isochron.io,resources=contentionprofiles,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile brings one CrawlerVM's VMI and status in line with its spec.
func (r *CrawlerVMReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, reterr error) {
	defer r.liveness.begin()()
	cvm := &isov1.CrawlerVM{}
	if err := r.Get(ctx, req.NamespacedName, cvm); err != nil {
		if apierrors.IsNotFound(err) {
			r.metrics.forget(req.Namespace, req.Name)
			r.placer.Forget(req.Namespace + "/" + req.Name)
			r.guestSecrets.forget(req.Namespace + "/" + req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	// Only the leader reconciles: its first reconcile builds the ledger from the API
	// server and checks what it inherits for overbooked nodes. Before the cache's copy is
	// taken in: the ledger assumes every reservation it is built with until the cache
	// shows it, and a copy taken in before the build would leave the crawler's own
	// assumed, its decision waiting for a cache update that never comes.
	if err := r.placer.ensureLedger(ctx); err != nil {
		return ctrl.Result{}, err
	}
	if r.placer.Observe(cvm) {
		// A reservation this replica did not decide: does its node hold more than it has?
		r.placer.recheck(ctx)
	}
	if !cvm.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // owner references let the garbage collector remove the VMI
	}
	if cvm.Status.Placement != nil && r.placer.ledger.Releasing(req.Namespace+"/"+req.Name) {
		// The cache's copy predates this replica's release of its reservation: acting on
		// it would pin the VM to the node released again. The release reaching the cache
		// brings the crawler back (reservationChanged).
		return ctrl.Result{}, nil
	}
	st := &statusWriter{Client: r.Client, recorder: r.Recorder, before: cvm.DeepCopy(), identity: r.identity}
	st.readyAtStart = apimeta.FindStatusCondition(st.before.Status.Conditions, isov1.ConditionReady)
	defer func() {
		if err := st.persist(ctx, cvm); err != nil {
			if reterr == nil {
				reterr = err
			}
			return
		}
		r.metrics.observe(cvm)
	}()
	if why, ok := r.placer.overbooked.get(req.Namespace + "/" + req.Name); ok {
		if res, handled, err := r.undoOverbooking(ctx, cvm, st, why); handled || err != nil {
			return res, err
		}
	}
	if done, err := r.place(ctx, cvm, st); err != nil || done {
		return ctrl.Result{}, err
	}
	// The probe gateway's Service first, so that a new VMI's agent is told its address.
	// A Service that cannot be had (its IP range full) does not hold the VMI back: its
	// agent then finds the gateway by name, and the error retries the Service.
	gatewayIP, svcErr := r.ensureProbeService(ctx, cvm, false)
	// Everything the rest decides on is read once: the VM, its VMI, their launcher pods
	// and the node (readiness.Scope).
	w, err := r.readWorld(ctx, cvm)
	if err != nil {
		return ctrl.Result{}, err
	}
	st.world = w
	running, err := r.runVM(ctx, cvm, st, w, gatewayIP)
	if err != nil {
		return ctrl.Result{}, err
	}
	if svcErr != nil {
		return ctrl.Result{}, svcErr
	}
	node := w.Node
	if node.Fenced {
		wait, err := r.recoverFromLostNode(ctx, cvm, st, node)
		return ctrl.Result{RequeueAfter: wait}, err
	}
	// A moving crawler is measured again where it arrives: no probe, no remediation and
	// no evacuation while it moves.
	steady := running
	if cvm.Status.Move != nil {
		steady = nil
	}
	after, err := r.runProbes(ctx, cvm, st, steady)
	if err != nil {
		return ctrl.Result{}, err
	}
	if node.Wait > 0 && (after == 0 || node.Wait < after) {
		after = node.Wait // the node not ready: look again when the grace ends
	}
	if err := r.guardAdopted(ctx, cvm, running); err != nil {
		return ctrl.Result{}, err
	}
	if running == nil {
		for _, recoverFrom := range []func(context.Context, *isov1.CrawlerVM, *statusWriter, *world) (time.Duration, error){r.recoverFromRejection, r.recoverFromUnschedulable, r.releaseIdle} {
			wait, err := recoverFrom(ctx, cvm, st, w)
			if err != nil {
				return ctrl.Result{}, err
			}
			if wait > 0 && (after == 0 || wait < after) {
				after = wait
			}
		}
	}
	for _, act := range []func() (time.Duration, error){
		func() (time.Duration, error) { return 0, r.takeOverMigrations(ctx, cvm, st, running) },
		func() (time.Duration, error) { return r.evacuate(ctx, cvm, st, steady) },
		func() (time.Duration, error) { _, wait, err := r.remediate(ctx, cvm, st, steady); return wait, err },
	} {
		wait, err := act()
		if err != nil {
			return ctrl.Result{}, err
		}
		if wait > 0 && (after == 0 || wait < after) {
			after = wait
		}
		if cvm.Status.Move != nil {
			break // moving: the move's next step comes with KubeVirt's next report
		}
	}
	if st.wait > 0 && (after == 0 || st.wait < after) {
		after = st.wait
	}
	return ctrl.Result{RequeueAfter: after}, nil
}

// statusWriter patches a CrawlerVM's status when, and only when, it changed, with an
// optimistic lock: a decision taken on a stale copy fails and is taken again. What tells
// of a status change (an Event, a counter: a probe recorded, a move made) is queued with
// after and happens once the status that records it is written: a write that loses a
// conflict drops it, and the reconcile that records the change again tells it then, so
// that it is told once whatever the conflicts.
type statusWriter struct {
	client.Client
	recorder record.EventRecorder
	before   *isov1.CrawlerVM
	pending  []func()
	// readyAtStart is the Ready condition as the reconcile found it (before moves on
	// with each write): what an outage begins or ends against.
	readyAtStart *metav1.Condition
	// readyStuck is whether the verdict that set Ready in this reconcile is stuck (nil
	// when none did): kstatus' Stalled, derived where the reason is set.
	readyStuck *bool
	// world is what the reconcile read of the crawler's world (readWorld), nil before.
	world *world
	// identity is the replica's leader-election identity (WithLeaderIdentity).
	identity string
	// wait is when the reconcile must look again at the latest (0: no such need).
	wait time.Duration
}

// retryAfter asks the reconcile to look again within d.
func (w *statusWriter) retryAfter(d time.Duration) {
	if w.wait == 0 || d < w.wait {
		w.wait = d
	}
}

// after queues f until the status is written.
func (w *statusWriter) after(f func()) { w.pending = append(w.pending, f) }

// event queues an Event on the crawler until the status is written.
func (w *statusWriter) event(cvm *isov1.CrawlerVM, kind, reason, message string) {
	w.after(func() { w.recorder.Event(cvm, kind, reason, message) })
}

func (w *statusWriter) persist(ctx context.Context, cvm *isov1.CrawlerVM) error {
	setProgress(cvm, w.readyStuck)
	if w.identity != "" && reservationOf(w.before) != reservationOf(cvm) {
		// A change of the reservation: admitted by the API server's leader fence only
		// while this replica holds the Lease.
		cvm.Status.DecidedBy = w.identity
	}
	if !equality.Semantic.DeepEqual(w.before.Status, cvm.Status) {
		if err := w.Status().Patch(ctx, cvm, client.MergeFromWithOptions(w.before, client.MergeFromWithOptimisticLock{})); err != nil {
			w.pending = nil
			return fmt.Errorf("patching status of %s: %w", klog.KObj(cvm), err)
		}
		w.before = cvm.DeepCopy()
	}
	for _, f := range w.pending {
		f()
	}
	w.pending = nil
	return nil
}
