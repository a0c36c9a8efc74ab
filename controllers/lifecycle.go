package controllers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/clock"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/format"
)

// How the manager lives: which replica leads, whether it is wedged, and the APIs it
// waits for.

// NewLeaderLock is the manager's leader election lock: the Lease isov1.LeaderLease in
// namespace (empty: the manager's own, in a cluster), held under a new identity, the host
// name and a UUID, as controller-runtime makes its own. The reconciler writes that
// identity with each reservation it changes (WithLeaderIdentity, status.decidedBy), and
// the API server's leader fence (config/admission) admits the change only while the
// Lease names it: a replica that lost the Lease without noticing (a long pause) writes
// no decision.
func NewLeaderLock(cfg *rest.Config, namespace string, renewDeadline time.Duration) (resourcelock.Interface, error) {
	if namespace == "" {
		b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
		if err != nil {
			return nil, fmt.Errorf("no --leader-election-namespace, and not in a cluster to take the manager's own: %w", err)
		}
		namespace = strings.TrimSpace(string(b))
	}
	host, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("naming this replica for leader election: %w", err)
	}
	id := host + "_" + string(uuid.NewUUID())
	return resourcelock.NewFromKubeconfig(resourcelock.LeasesResourceLock, namespace, isov1.LeaderLease,
		resourcelock.ResourceLockConfig{Identity: id}, cfg, renewDeadline)
}

// DefaultReconcileTimeout is how long one reconcile of a crawler may take (its context's
// deadline, --reconcile-timeout): a reconcile makes a few calls to the API server, and
// the leader's first decision lists every crawler.
const DefaultReconcileTimeout = time.Minute

// liveness tells whether the manager is wedged, for its liveness probe (Healthz): a
// reconcile that runs well past its deadline (something it waits on ignores its context),
// or a decision lock held longer than any decision takes (decisions only read memory
// under it). Either stops every decision while work waits; the kubelet then restarts the
// manager, and the other replica leads.
type liveness struct {
	clock clock.PassiveClock
	// deadline is a reconcile's deadline; lock tells since when the placer's decision lock
	// has been held.
	deadline time.Duration
	lock     interface{ DecidingSince() (time.Time, bool) }

	mu      sync.Mutex
	running map[uint64]time.Time
	next    uint64
}

// begin records a reconcile starting now, and returns the function that records its end.
func (l *liveness) begin() (end func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.running == nil {
		l.running = map[uint64]time.Time{}
	}
	l.next++
	id := l.next
	l.running[id] = l.clock.Now()
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(l.running, id)
	}
}

// Healthz is the liveness check (healthz.Checker): an error says how the manager is
// wedged.
func (l *liveness) Healthz(*http.Request) error {
	l.mu.Lock()
	var oldest time.Time
	for _, t := range l.running {
		if oldest.IsZero() || t.Before(oldest) {
			oldest = t
		}
	}
	l.mu.Unlock()
	lockedSince, locked := l.lock.DecidingSince()
	if !locked {
		lockedSince = time.Time{}
	}
	return wedged(l.clock.Now(), oldest, lockedSince, l.deadline)
}

// wedged says how the manager is wedged at now, or nil: the oldest reconcile still
// running began at oldest and the decision lock was taken at locked (zero: none). A
// reconcile may run to twice its deadline (a call it made may take that long to notice),
// and the lock may be held for the deadline: far longer than a batch of decisions takes.
func wedged(now, oldest, locked time.Time, deadline time.Duration) error {
	if !locked.IsZero() && now.Sub(locked) > deadline {
		return fmt.Errorf("the placement decision lock has been held for %s, more than the %s a reconcile may take: decisions are stuck",
			format.Duration(now.Sub(locked).Round(time.Second)), format.Duration(deadline))
	}
	if !oldest.IsZero() && now.Sub(oldest) > 2*deadline {
		return fmt.Errorf("a reconcile has run for %s, past twice its %s deadline (--reconcile-timeout): it waits on something that ignores its deadline",
			format.Duration(now.Sub(oldest).Round(time.Second)), format.Duration(deadline))
	}
	return nil
}

// DefaultAPIPollInterval is how often the operator asks the API server's discovery
// whether an optional API it waits for (Multus' NetworkAttachmentDefinition) is served.
const DefaultAPIPollInterval = 10 * time.Second

// optionalAPI waits for an API that isochron can run without and, once the API server
// serves it, starts what needs it, as Kueue's waitForAPI does for its optional job
// integrations. It asks discovery (through the manager's REST mapper, which reloads a
// group it does not know) rather than watching CustomResourceDefinitions: no permission
// on CRDs, and none of their large objects in memory.
type optionalAPI struct {
	gvk    schema.GroupVersionKind
	mapper apimeta.RESTMapper
	every  time.Duration
	// served starts what needs the API, once, when the API is first served; waited says
	// whether it was missing when the operator started.
	served func(ctx context.Context, waited bool) error
	log    logr.Logger
}

// Start polls until the API is served, runs served, and returns.
func (o *optionalAPI) Start(ctx context.Context) error {
	t := time.NewTicker(o.every)
	defer t.Stop()
	waited := false
	for {
		_, err := o.mapper.RESTMapping(o.gvk.GroupKind(), o.gvk.Version)
		switch {
		case err == nil:
			if waited {
				o.log.Info("API now served: watching it", "gvk", o.gvk)
			}
			return o.served(ctx, waited)
		case !apimeta.IsNoMatchError(err):
			o.log.Error(err, "Reading the API server's discovery", "gvk", o.gvk)
		case !waited:
			o.log.Info("API not served: waiting for it; crawlers that need it say so in their status", "gvk", o.gvk, "every", o.every.String())
			waited = true
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// NeedLeaderElection is false: every replica's cache must know the API, as any
// replica's controller may come to lead.
func (o *optionalAPI) NeedLeaderElection() bool { return false }

// withRTNIC are the crawlers with an RT-NIC, whatever their network: those waiting for
// an API the RT-NIC needs.
func withRTNIC(_, _ client.Object) []crawlers {
	return []crawlers{{keep: func(c *isov1.CrawlerVM) bool { return c.Spec.RTNIC != nil }}}
}

// wake sends one event on ch without blocking: a wake already pending does the same.
func wake(ch chan event.GenericEvent, obj client.Object) {
	select {
	case ch <- event.GenericEvent{Object: obj}:
	default:
	}
}

// ErrKubeVirtServed ends a manager that started without KubeVirt's API (WaitForKubeVirt)
// once the cluster serves it: its process starts again and watches it.
var ErrKubeVirtServed = errors.New("KubeVirt's API is served now")

// KubeVirtServed says whether the cluster cfg names serves KubeVirt's API
// (kubevirt.io/v1), which the operator cannot run without: it caches and watches VMs, VMIs
// and migrations from its start.
func KubeVirtServed(cfg *rest.Config) (bool, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return false, err
	}
	gv := kubevirtv1.SchemeGroupVersion.String()
	_, err = dc.ServerResourcesForGroupVersion(gv)
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	default:
		return false, fmt.Errorf("reading the API server's discovery for %s: %w", gv, err)
	}
}

// WaitForKubeVirt sets up a manager that started where the cluster does not serve
// KubeVirt's API: instead of failing at every start (a crash loop), it tells every
// CrawlerVM so (Ready=False, KubeVirtNotInstalled), looks for the API every interval, and
// ends its manager with ErrKubeVirtServed once it is served.
func WaitForKubeVirt(mgr ctrl.Manager, every time.Duration) error {
	w := &kubeVirtMissing{Client: mgr.GetClient()}
	if err := ctrl.NewControllerManagedBy(mgr).For(&isov1.CrawlerVM{}).Named("crawlervm-waiting-for-kubevirt").Complete(w); err != nil {
		return err
	}
	gvk := kubevirtv1.VirtualMachineGroupVersionKind
	return mgr.Add(&optionalAPI{gvk: gvk, mapper: mgr.GetRESTMapper(), every: every, log: mgr.GetLogger().WithName("kubevirt-api"),
		served: func(context.Context, bool) error { return ErrKubeVirtServed }})
}

// kubeVirtMissing reports, on every CrawlerVM, that KubeVirt's API is not served.
type kubeVirtMissing struct{ client.Client }

// KubeVirtNotInstalledMessage is what a crawler's Ready condition says while the cluster
// does not serve KubeVirt's API.
const KubeVirtNotInstalledMessage = "the cluster does not serve KubeVirt's API (kubevirt.io/v1 VirtualMachine): install KubeVirt; isochron places and starts the crawler once it is served (its manager restarts itself then)"

func (w *kubeVirtMissing) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cvm := &isov1.CrawlerVM{}
	if err := w.Get(ctx, req.NamespacedName, cvm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if c := apimeta.FindStatusCondition(cvm.Status.Conditions, isov1.ConditionReady); c != nil && c.Reason == isov1.ReasonKubeVirtNotInstalled {
		return ctrl.Result{}, nil
	}
	before := cvm.DeepCopy()
	apimeta.SetStatusCondition(&cvm.Status.Conditions, metav1.Condition{Type: isov1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: isov1.ReasonKubeVirtNotInstalled, Message: KubeVirtNotInstalledMessage, ObservedGeneration: cvm.Generation})
	if err := w.Status().Patch(ctx, cvm, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return ctrl.Result{}, fmt.Errorf("patching status of %s: %w", req.NamespacedName, err)
	}
	return ctrl.Result{}, nil
}
