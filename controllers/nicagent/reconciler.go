package nicagent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/inventory"
	"isochron.io/isochron/internal/rtnet"
)

// Programmer changes the host's traffic control.
type Programmer interface {
	// Port is the interface by which bridge's traffic leaves the host: its one port that
	// is not a VM's or a pod's.
	Port(bridge string) (string, error)
	// Apply makes link's egress schedule flows shaped to linkRate (bits/s: the line rate's
	// rtnet.ShapedRate), changing only what
	// differs; no flows removes isochron's schedule. Nothing else's qdiscs are touched.
	Apply(link string, linkRate int64, flows []Flow) error
	// Programmed lists the links that carry isochron's schedule.
	Programmed() ([]string, error)
	// Stats is what link's schedule counted for each flow (by Flow.Key).
	Stats(link string) (map[string]FlowStats, error)
}

// Reconciler programs its node's RT uplinks.
type Reconciler struct {
	client.Client
	Recorder record.EventRecorder
	// Node is the node the agent runs on.
	Node string
	// Uplinks are the host interfaces the cluster administrator named as RT uplinks
	// (ConfigMap isochron-networks, rtUplinks): the only ones the agent programs. A
	// network whose uplink (its AnnotationRTUplink, or its bridge's port) is not one of
	// them gets nothing on the host, and its crawlers say why (status.rtNIC.notScheduled).
	Uplinks    []string
	Programmer Programmer
	// Clock tells the feedback the time (default: the real clock).
	Clock clock.PassiveClock
	// Feedback raises and lowers flows' classes (default rtnet.DefaultFeedback).
	Feedback rtnet.Feedback
	// StatsEvery is how often the host's counters are read while the node has RT-NICs
	// (default DefaultStatsEvery).
	StatsEvery time.Duration

	// stats are each flow's counters at the last reading; the feedback counts what
	// changed since.
	stats map[string]FlowStats
	// leaving is the cache of the crawlers moving from the node (leavingCacheOptions);
	// the manager's cache holds those placed on it (CacheOptions).
	leaving cache.Cache
}

// Reconcile computes what the node's uplinks should schedule and applies it. Every event
// reconciles the one node, so a burst of changes is one reconciliation. A link that
// cannot be programmed (none found, a kernel without qdiscs) is reported on the Node as a
// Warning Event and in the log, and not retried until something changes: the agent never
// crashes on it.
func (r *Reconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	node := &corev1.Node{}
	if err := r.Get(ctx, types.NamespacedName{Name: r.Node}, node); err != nil {
		return ctrl.Result{}, fmt.Errorf("reading node %s: %w", r.Node, err)
	}
	var crawlers, leaving isov1.CrawlerVMList
	if err := r.List(ctx, &crawlers); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.leaving.List(ctx, &leaving); err != nil {
		return ctrl.Result{}, err
	}
	// The crawlers placed here, then those moving from here: the agent schedules both.
	all := append(slices.Clip(crawlers.Items), leaving.Items...)
	byKey := map[string]*isov1.CrawlerVM{}
	for i := range all {
		byKey[all[i].Namespace+"/"+all[i].Name] = &all[i]
	}
	var nads nadv1.NetworkAttachmentDefinitionList
	if err := r.List(ctx, &nads); err != nil && !apimeta.IsNoMatchError(err) {
		return ctrl.Result{}, err
	}
	var profiles isov1.ContentionProfileList
	if err := r.List(ctx, &profiles); err != nil {
		return ctrl.Result{}, err
	}
	// The uplink is shaped a little below its line rate, as the model assumes.
	// The node's profile's link rate, or the model's default (1 Gbit/s) without one.
	rate := rtnet.ShapedRate(inventory.Params(inventory.ProfileFor(node, profiles.Items)).WithDefaults().LinkRateBitsPerSecond)
	uplinks, skipped := Desired(r.Node, all, nads.Items)
	// What the host does for each crawler's RT-NIC (by key), and what the agent saw of it.
	host := map[string]hostState{}
	obs := map[string][]rtnet.Observation{}
	for _, s := range skipped {
		logger.V(1).Info("RT-NIC not scheduled on the host", "crawler", s.Key, "reason", s.Reason)
		host[s.Key] = hostState{notScheduled: s.Reason}
	}

	var errs []error
	want := map[string]bool{}
	for _, up := range uplinks {
		link := up.Interface
		if link == "" {
			port, err := r.Programmer.Port(up.Bridge)
			if err != nil {
				msg := fmt.Sprintf("no RT uplink for networks %v (bridge %s): %v; name it with the annotation %s on the NetworkAttachmentDefinition", up.Networks, up.Bridge, err, isov1.AnnotationRTUplink)
				r.notScheduled(node, up, msg, host)
				continue
			}
			link = port
		}
		if !slices.Contains(r.Uplinks, link) {
			r.notScheduled(node, up, UplinkNotNamed(link, up, r.Uplinks), host)
			continue
		}
		want[link] = true
		if err := r.Programmer.Apply(link, rate, up.Flows); err != nil {
			r.notScheduled(node, up, fmt.Sprintf("programming RT uplink %s for %d RT-NICs of networks %v: %v", link, len(up.Flows), up.Networks, err), host)
			continue
		}
		logger.V(1).Info("Programmed RT uplink", "link", link, "flows", len(up.Flows), "linkRate", rate)
		stats, err := r.Programmer.Stats(link)
		if err != nil {
			errs = append(errs, fmt.Errorf("reading the counters of %s: %w", link, err))
		}
		for _, f := range up.Flows {
			now, seen := stats[f.Key], r.stats[f.Key]
			var prev *FlowStats
			if _, ok := r.stats[f.Key]; ok {
				prev = &seen
			}
			r.stats[f.Key] = now
			host[f.Key] = hostState{uplink: link}
			obs[f.Key] = observations(byKey[f.Key], link, now, prev)
		}
	}
	// Only the agent of the node a crawler is placed on writes its status.rtNIC (an
	// admission policy holds each agent to its own node's crawlers): the node it leaves
	// schedules it until the move ends, and writes nothing.
	for i := range crawlers.Items {
		c := &crawlers.Items[i]
		key := c.Namespace + "/" + c.Name
		if c.Spec.RTNIC == nil || c.Status.Placement == nil || c.Status.Placement.Node != r.Node {
			continue
		}
		if err := r.feedback(ctx, c, obs[key], host[key]); err != nil {
			errs = append(errs, err)
		}
	}
	// Uplinks whose last flow left: isochron's schedule comes off them.
	programmed, err := r.Programmer.Programmed()
	if err != nil {
		errs = append(errs, err)
	}
	slices.Sort(programmed)
	for _, link := range programmed {
		if !want[link] {
			if err := r.Programmer.Apply(link, rate, nil); err != nil {
				errs = append(errs, fmt.Errorf("removing isochron's schedule from %s: %w", link, err))
				continue
			}
			logger.Info("Removed RT schedule", "link", link)
		}
	}
	res := ctrl.Result{}
	if len(uplinks) > 0 {
		res.RequeueAfter = r.StatsEvery // the counters change without an event
	}
	return res, errors.Join(errs...)
}

// DefaultStatsEvery is how often the agent reads its schedule's counters.
const DefaultStatsEvery = 10 * time.Second

// hostState is what the host does for one crawler's RT-NIC: the uplink that schedules
// it, or why none does.
type hostState struct {
	uplink, notScheduled string
}

// notScheduled reports on the node that up's flows get nothing on the host, and why;
// each of its crawlers says so too.
func (r *Reconciler) notScheduled(node *corev1.Node, up Uplink, msg string, host map[string]hostState) {
	r.report(node, msg)
	for _, f := range up.Flows {
		host[f.Key] = hostState{notScheduled: msg}
	}
}

// UplinkNotNamed says that link, the uplink of up's networks, is not one of the RT
// uplinks the administrator named (allowed), and what to do.
func UplinkNotNamed(link string, up Uplink, allowed []string) string {
	named := "none"
	if len(allowed) > 0 {
		named = strings.Join(allowed, ", ")
	}
	how := "named by the annotation " + isov1.AnnotationRTUplink
	if up.Interface == "" {
		how = "the port of bridge " + up.Bridge
	}
	return fmt.Sprintf("host interface %s (%s of networks %s) is not one of the RT uplinks the cluster administrator named (%s): the NIC agent schedules and marks no RT traffic on it; name an RT uplink with the annotation %s on the NetworkAttachmentDefinition, or have the administrator add %s to rtUplinks in the ConfigMap isochron-networks",
		link, how, strings.Join(up.Networks, ", "), named, isov1.AnnotationRTUplink, link)
}

// report tells the node's administrator what the agent cannot do.
func (r *Reconciler) report(node *corev1.Node, msg string) {
	log.Log.WithName("nic-agent").Info("Cannot program the RT uplink", "node", node.Name, "problem", msg)
	r.Recorder.Event(node, corev1.EventTypeWarning, isov1.EventReasonRTUplinkUnavailable, msg)
}

// SetupWithManager reconciles the node on every change of a CrawlerVM, a
// NetworkAttachmentDefinition (when Multus' API is served), a ContentionProfile or the
// node itself.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.Feedback == (rtnet.Feedback{}) {
		r.Feedback = rtnet.DefaultFeedback
	}
	if r.StatsEvery == 0 {
		r.StatsEvery = DefaultStatsEvery
	}
	r.stats = map[string]FlowStats{}
	leaving, err := cache.New(mgr.GetConfig(), func() cache.Options {
		o := leavingCacheOptions(r.Node)
		o.Scheme, o.Mapper = mgr.GetScheme(), mgr.GetRESTMapper()
		return o
	}())
	if err != nil {
		return fmt.Errorf("the cache of crawlers leaving node %s: %w", r.Node, err)
	}
	if err := mgr.Add(leaving); err != nil {
		return err
	}
	r.leaving = leaving
	enqueue := toNode(r.Node)
	// The caches hold only the crawlers placed on this node and those moving from it
	// (CacheOptions); only this node, and not its heartbeats (its labels choose its
	// profile).
	thisNode := predicate.And(predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == r.Node }),
		predicate.LabelChangedPredicate{})
	b := ctrl.NewControllerManagedBy(mgr).Named("nic-agent").
		Watches(&isov1.CrawlerVM{}, enqueue).
		WatchesRawSource(source.Kind(leaving, client.Object(&isov1.CrawlerVM{}), enqueue)).
		Watches(&isov1.ContentionProfile{}, enqueue).
		Watches(&corev1.Node{}, enqueue, builder.WithPredicates(thisNode))
	if _, err := mgr.GetRESTMapper().RESTMapping(nadv1.SchemeGroupVersion.WithKind("NetworkAttachmentDefinition").GroupKind(), nadv1.SchemeGroupVersion.Version); err == nil {
		b = b.Watches(&nadv1.NetworkAttachmentDefinition{}, enqueue)
	}
	return b.Complete(r)
}
