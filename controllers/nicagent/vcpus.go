package nicagent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/format"
	"isochron.io/isochron/internal/hostsched"
)

// Threads reads and sets the host's scheduling of domains' vCPU threads.
type Threads interface {
	// VCPUs reads the vCPU threads of the QEMU that runs l's domain in l's container on
	// this node; hostsched.ErrNoDomain when none does.
	VCPUs(l hostsched.Launcher) ([]hostsched.Thread, error)
	// SetRealtime gives thread tid SCHED_FIFO at hostsched.RealtimePriority.
	SetRealtime(tid int) error
}

// VCPUGuard keeps the vCPUs of its node's dedicated crawlers realtime: a vCPU thread of
// such a crawler's QEMU seen without SCHED_FIFO for Grace gets the policy KubeVirt's
// realtime asks for (SCHED_FIFO, priority 1), and the crawler a Warning Event that says
// so. Only the QEMU in the compute container of the crawler's own launcher pod counts
// (LauncherOf): a process elsewhere that names itself like it is never touched. KubeVirt 1.8.4 leaves a domain's vCPUs SCHED_OTHER when its first start outlasts
// virt-handler's 20 s sync (package hostsched); the guard is what sees and undoes it,
// with no restart.
type VCPUGuard struct {
	client.Client
	Recorder record.EventRecorder
	// Node is the node the agent runs on.
	Node    string
	Threads Threads
	// Clock tells the time (default: the real clock).
	Clock clock.PassiveClock
	// Grace is how long a vCPU may be seen not realtime before the guard acts (default
	// DefaultVCPUGrace): KubeVirt sets the policy itself seconds after the domain runs.
	Grace time.Duration
	// Every is how often the threads are read while the node has dedicated crawlers
	// (default DefaultVCPUEvery): a thread's policy changes without an event.
	Every time.Duration

	// since holds, per domain, when each of its vCPU threads was first seen not realtime.
	since map[string]map[int]time.Time
}

const (
	// DefaultVCPUGrace is how long a dedicated crawler's vCPU may run without SCHED_FIFO
	// before the guard gives it: KubeVirt's own start sets it within seconds.
	DefaultVCPUGrace = 30 * time.Second
	// DefaultVCPUEvery is how often the guard reads the vCPU threads.
	DefaultVCPUEvery = 10 * time.Second
)

// Domain is the libvirt domain (and QEMU guest name) of a crawler's VMI: KubeVirt names
// it "<namespace>_<VMI name>", and the VMI is named after its crawler.
func Domain(c *isov1.CrawlerVM) string { return c.Namespace + "_" + c.Name }

// dedicated tells whether c is a dedicated crawler (exclusive CPUs, realtime vCPUs)
// placed on node.
func dedicated(c *isov1.CrawlerVM, node string) bool {
	return c.Status.Placement != nil && c.Status.Placement.Node == node && c.Status.Sizing != nil && c.Status.Sizing.HostCPUs > 0
}

// Reconcile reads the vCPU threads of every dedicated crawler on the node and makes
// realtime those due (hostsched.Due). A crawler whose QEMU does not run here (starting,
// moving, gone) is skipped; a failed read or set is logged (and a refused set said in an
// Event) and tried again at the next look, Every later.
func (g *VCPUGuard) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	var crawlers isov1.CrawlerVMList
	if err := g.List(ctx, &crawlers); err != nil {
		return ctrl.Result{}, err
	}
	now := g.Clock.Now()
	seen := map[string]bool{}
	var pods corev1.PodList
	if err := g.List(ctx, &pods); err != nil { // the cache holds this node's launchers only
		return ctrl.Result{}, err
	}
	var errs []error
	for i := range crawlers.Items {
		c := &crawlers.Items[i]
		if !dedicated(c, g.Node) {
			continue
		}
		domain := Domain(c)
		seen[domain] = true
		vmi := &kubevirtv1.VirtualMachineInstance{}
		if err := g.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: vmiName(c)}, vmi); err != nil {
			if !apierrors.IsNotFound(err) && !apimeta.IsNoMatchError(err) {
				errs = append(errs, fmt.Errorf("reading the VMI of %s/%s: %w", c.Namespace, c.Name, err))
			}
			vmi = nil
		}
		launcher, why, ok := LauncherOf(c, vmi, pods.Items, g.Node)
		if !ok {
			logger.V(1).Info("No launcher proves a QEMU the crawler's", "crawler", c.Namespace+"/"+c.Name, "reason", why)
			delete(g.since, domain)
			continue
		}
		vcpus, err := g.Threads.VCPUs(launcher)
		if errors.Is(err, hostsched.ErrNoDomain) {
			logger.V(1).Info("No QEMU of the crawler runs in its launcher", "crawler", c.Namespace+"/"+c.Name, "reason", err.Error())
			delete(g.since, domain)
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("reading the vCPU threads of %s/%s: %w", c.Namespace, c.Name, err))
			continue
		}
		v := hostsched.Due(g.since[domain], vcpus, now, g.Grace)
		g.since[domain] = v.Seen
		if len(v.Due) == 0 {
			continue
		}
		var set, failed []string
		for _, t := range v.Due {
			if err := g.Threads.SetRealtime(t.TID); err != nil {
				failed = append(failed, fmt.Sprintf("%s: %v", t, err))
				continue
			}
			set = append(set, t.String())
		}
		ran := format.Duration(now.Sub(v.Since))
		if len(set) > 0 {
			msg := fmt.Sprintf("vCPU threads %s ran without SCHED_FIFO for %s or more on node %s; set SCHED_FIFO priority %d, as KubeVirt's realtime asks (KubeVirt 1.8.4 sets it only in a virt-handler pass that finds the VMI not yet Running)",
				strings.Join(set, ", "), ran, g.Node, hostsched.RealtimePriority)
			logger.Info("Made vCPUs realtime", "crawler", c.Namespace+"/"+c.Name, "threads", set)
			g.Recorder.Event(c, corev1.EventTypeWarning, isov1.EventReasonVCPUsMadeRealtime, msg)
		}
		if len(failed) > 0 {
			msg := fmt.Sprintf("vCPU threads of its QEMU run without SCHED_FIFO on node %s and cannot be given it: %s; give the agent CAP_SYS_NICE and the host's PID namespace (config/nic-agent)",
				g.Node, strings.Join(failed, "; "))
			g.Recorder.Event(c, corev1.EventTypeWarning, isov1.EventReasonVCPUsNotRealtime, msg)
			errs = append(errs, errors.New(msg))
		}
	}
	for domain := range g.since {
		if !seen[domain] {
			delete(g.since, domain)
		}
	}
	if len(seen) == 0 {
		return ctrl.Result{}, errors.Join(errs...)
	}
	// The guard looks again every Every whatever failed: a thread it could not read or
	// set is tried again then (and said in an Event), not after the controller's error
	// backoff, which grows to minutes while a thread stays refused.
	if err := errors.Join(errs...); err != nil {
		logger.Error(err, "Guarding the vCPU threads of the node's dedicated crawlers")
	}
	return ctrl.Result{RequeueAfter: g.Every}, nil
}

// SetupWithManager reads the threads on every change of a CrawlerVM on the node, and
// every Every while it has dedicated crawlers.
func (g *VCPUGuard) SetupWithManager(mgr ctrl.Manager) error {
	if g.Clock == nil {
		g.Clock = clock.RealClock{}
	}
	if g.Grace == 0 {
		g.Grace = DefaultVCPUGrace
	}
	if g.Every == 0 {
		g.Every = DefaultVCPUEvery
	}
	g.since = map[string]map[int]time.Time{}
	onThisNode := crawlersWhere(func(c *isov1.CrawlerVM) bool { return dedicated(c, g.Node) })
	return ctrl.NewControllerManagedBy(mgr).Named("vcpu-guard").
		Watches(&isov1.CrawlerVM{}, toNode(g.Node), builder.WithPredicates(onThisNode)).
		Complete(g)
}
