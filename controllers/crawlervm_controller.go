// Package controllers holds isochron's reconcilers. They are I/O glue: they gather the
// inputs, call the pure core in internal/ to size, place, render and judge, write the
// results with server-side apply, and patch status only when it changed, so a steady
// cluster produces no writes.
//
// A reconcile of a CrawlerVM (Reconcile) gathers the crawler into a scope, whose inputs
// (its VM, VMI, launcher pods and node, its RT network, KubeVirt's settings, its placement
// request) are each read at most once, on first use; it runs the phases in order
// (CrawlerVMReconciler.phases), each of which may stop the reconcile and says when to look
// again; and it writes the status once, at the end. The one exception is a change of the
// crawler's reservation, which goes through the placer (internal/placer, the one door)
// and is written before anything is done on it (reserve).
//
// Files: crawlervm_controller.go (the reconciler, its phases), crawlervm_scope.go (what a
// reconcile reads), crawlervm_status.go (the status and how it is written),
// crawlervm_place.go (placement and the one persist site), crawlervm_vm.go and
// crawlervm_adopt.go (the VM, judged then written), crawlervm_move.go (the move engine),
// crawlervm_migrate.go (carrying a move out, migrations asked for outside isochron),
// crawlervm_triggers.go (what makes a crawler move), crawlervm_downtime.go (outages and
// idle reservations), the probes and calibration, the watches and their triggers, and
// the manager's setup and lifecycle.
package controllers

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/access"
	"isochron.io/isochron/internal/move"
	"isochron.io/isochron/internal/nodebooks"
	"isochron.io/isochron/internal/placer"
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
	// budget bounds the moves asked for outside isochron.
	budget move.Budget
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
	// placer decides where crawlers go and holds their reservations: every change of one
	// goes through it (reserve).
	placer *placer.Placer
	// books are what the pods bound to each node hold, kept on the leader (booksSource).
	books *nodebooks.Books
	// wakes carry what happens outside a reconcile to the crawlers it concerns.
	wakes wakes
	// written are this replica's last status writes not yet in the cache (begin).
	written ownWrites
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
		budget:             move.DefaultBudget,
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
	r.metrics = newMetrics(r.clock.Now())
	r.books = nodebooks.New()
	r.wakes = newWakes()
	r.placer = placer.New(r.Client, r.APIReader, placer.Options{
		Clock: r.clock, Books: r.books, Informers: mgr.GetCache(),
		BatchSize: r.metrics.placementBatch.Observe, DecisionTime: r.metrics.placementDuration.Observe,
		Released: r.wakes.releasedNode, Overbooked: r.wakes.redecide,
	})
	r.liveness = &liveness{clock: r.clock, deadline: r.reconcileTimeout, lock: r.placer}
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

// Reconcile brings one CrawlerVM's VM and status in line with its spec: it gathers the
// crawler into a scope, runs the phases in order, and writes the status once at the end.
func (r *CrawlerVMReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, reterr error) {
	defer r.liveness.begin()()
	s, res, err := r.begin(ctx, req)
	if s == nil || err != nil {
		return res, err
	}
	defer func() {
		if err := s.persist(ctx, s.cvm); err != nil {
			if reterr == nil {
				reterr = err
			}
			return
		}
		r.metrics.observe(s.cvm)
	}()
	return r.run(ctx, s, r.phases())
}

// phase is one step of a reconcile: it reads what it needs through the scope, may stop the
// reconcile (scope.stop), and says when to look again.
type phase func(context.Context, *scope) (ctrl.Result, error)

// phases are the steps of a reconcile, in order (Cluster API's machine controller).
func (r *CrawlerVMReconciler) phases() []phase {
	return []phase{
		r.redecideOverbooked,   // the youngest reservation of a node that holds more than it has moves or goes
		r.place,                // a node for the spec, or a fresh prediction on the node held
		r.serveProbes,          // the probe gateway's Service, whose address a new VMI's agent is told
		r.runVM,                // the VM written as the reservation says, its VMI judged, a move's next step
		r.recoverLostNode,      // a crawler on a fenced node starts elsewhere
		r.probe,                // probe Jobs, their verdicts and the node's calibration
		r.guardAdopted,         // an adopted VMI's disruption budget until its next start
		r.recoverRejected,      // a launcher its node's kubelet refused: elsewhere
		r.recoverUnschedulable, // a launcher its node cannot schedule: elsewhere, once
		r.releaseIdle,          // a crawler down for long: its reservation released
		r.takeOverMigrations,   // a migration asked for outside isochron: by isochron's route
		r.evacuate,             // a drain
		r.remediate,            // a probe that refuted the crawler's SLO on its node
	}
}

// run runs phases in order until one fails or stops the reconcile, and merges their
// results: the soonest look again wins.
func (r *CrawlerVMReconciler) run(ctx context.Context, s *scope, phases []phase) (ctrl.Result, error) {
	var after time.Duration
	for _, p := range phases {
		res, err := p(ctx, s)
		if err != nil {
			return ctrl.Result{}, err
		}
		after = sooner(after, res.RequeueAfter)
		if s.stopped {
			break
		}
	}
	return ctrl.Result{RequeueAfter: sooner(after, s.wait)}, nil
}

// sooner is the sooner of two waits, 0 standing for none.
func sooner(a, b time.Duration) time.Duration {
	if a == 0 || (b > 0 && b < a) {
		return b
	}
	return a
}

// begin reads the crawler and admits it with the placer; nil when there is nothing to do:
// the crawler is gone (its reservation, counters and Secret hash forgotten), being
// deleted (owner references let the garbage collector remove its VM), or the cache's copy
// is older than what this replica wrote: than its last status write (looked at again
// shortly, ownWrites), or a change of its reservation (placer.Admission.Behind: the change
// reaching the cache brings the crawler back).
func (r *CrawlerVMReconciler) begin(ctx context.Context, req ctrl.Request) (*scope, ctrl.Result, error) {
	cvm := &isov1.CrawlerVM{}
	if err := r.Get(ctx, req.NamespacedName, cvm); err != nil {
		if apierrors.IsNotFound(err) {
			r.metrics.forget(req.Namespace, req.Name)
			r.placer.Forget(req.String())
			r.guestSecrets.forget(req.String())
			r.written.forget(req.String())
		}
		return nil, ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if r.written.behind(req.String(), cvm.ResourceVersion) {
		return nil, ctrl.Result{RequeueAfter: cacheLagRetry}, nil
	}
	adm, err := r.placer.Admit(ctx, cvm)
	if err != nil || !cvm.DeletionTimestamp.IsZero() || adm.Behind {
		return nil, ctrl.Result{}, err
	}
	st := &statusWriter{Client: r.Client, recorder: r.Recorder, before: cvm.DeepCopy(), identity: r.identity, written: &r.written}
	st.readyAtStart = apimeta.FindStatusCondition(st.before.Status.Conditions, isov1.ConditionReady)
	return &scope{statusWriter: st, r: r, cvm: cvm, overbooked: adm.Overbooked}, ctrl.Result{}, nil
}
