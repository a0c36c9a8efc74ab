package nicagent_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/controllers/nicagent"
	"isochron.io/isochron/internal/rtnet"
	"isochron.io/isochron/test/support/scale"
	"isochron.io/isochron/test/support/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	var err error
	if env, err = testenv.Start("../.."); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	env.Stop()
	os.Exit(code)
}

// host is a recording Programmer: the flows (keys) each link schedules, their raises,
// and drop counters a test sets.
type host struct {
	mu     sync.Mutex
	ports  map[string]string // bridge -> port
	links  map[string][]string
	raises map[string]int
	drops  map[string]uint64
	rate   int64 // of the last Apply with flows
	// touched are the links Apply was ever called on; applies counts the calls.
	touched map[string]bool
	applies int
}

// waitApplies waits until Apply was called n more times than before: the agent has
// reconciled the node again.
func (h *host) waitApplies(t *testing.T, n int) {
	t.Helper()
	h.mu.Lock()
	want := h.applies + n
	h.mu.Unlock()
	eventually(t, fmt.Sprintf("%d calls of Apply", want), func() (bool, string) {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.applies >= want, fmt.Sprintf("%d calls", h.applies)
	})
}

func newHost(ports map[string]string) *host {
	return &host{ports: ports, links: map[string][]string{}, raises: map[string]int{}, drops: map[string]uint64{}, touched: map[string]bool{}}
}

// uplinks are the host's bridge ports: the RT uplinks an administrator would name.
func (h *host) uplinks() []string {
	var out []string
	for _, p := range h.ports {
		out = append(out, p)
	}
	return out
}

func (h *host) Stats(string) (map[string]nicagent.FlowStats, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]nicagent.FlowStats{}
	for k, d := range h.drops {
		out[k] = nicagent.FlowStats{Drops: d}
	}
	return out, nil
}

func (h *host) drop(key string, n uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.drops[key] += n
}

func (h *host) raise(key string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.raises[key]
}

func (h *host) Port(bridge string) (string, error) {
	if p, ok := h.ports[bridge]; ok {
		return p, nil
	}
	return "", fmt.Errorf("bridge %s has no physical port", bridge)
}

func (h *host) Apply(link string, rate int64, flows []nicagent.Flow) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.touched[link] = true
	h.applies++
	var keys []string
	for _, f := range flows {
		keys = append(keys, f.Key)
		h.raises[f.Key] = f.Raise
	}
	if len(keys) == 0 {
		delete(h.links, link)
		return nil
	}
	h.rate = rate
	h.links[link] = keys
	return nil
}

func (h *host) Programmed() ([]string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for l := range h.links {
		out = append(out, l)
	}
	return out, nil
}

func (h *host) schedule() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for l, keys := range h.links {
		out = append(out, l+"="+strings.Join(keys, ","))
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// agent runs the NIC agent of node until the test ends or stop is called, with the
// host's bridge ports named as RT uplinks.
func agent(t *testing.T, node string, h *host, clk clock.PassiveClock) (stop func()) {
	t.Helper()
	return agentWith(t, node, h, clk, h.uplinks())
}

// agentWith runs the NIC agent of node with uplinks named as RT uplinks.
func agentWith(t *testing.T, node string, h *host, clk clock.PassiveClock, uplinks []string) (stop func()) {
	t.Helper()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: nicagent.CacheOptions(node), Controller: ctrlconfig.Controller{SkipNameValidation: ptr.To(true)}}) // a restarted agent in one process
	if err != nil {
		t.Fatal(err)
	}
	r := &nicagent.Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorderFor(isov1.NICAgent), Node: node, Uplinks: uplinks, Programmer: h,
		Clock: clk, Feedback: rtnet.Feedback{MinInterval: 10 * time.Minute, CleanToLower: 1}, StatsEvery: 100 * time.Millisecond}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(ctx) }()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return stop
}

// place creates (or moves) a crawler with an RT-NIC on network and gives it a
// reservation on node, as the operator would.
func place(t *testing.T, ns, name, network, node string) {
	t.Helper()
	placeWithDeadline(t, ns, name, network, node, 5*time.Millisecond)
}

func placeWithDeadline(t *testing.T, ns, name, network, node string, deadline time.Duration) {
	t.Helper()
	ctx := context.Background()
	c := &isov1.CrawlerVM{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, c); err != nil {
		c = scale.Crawler(ns, name, 100, false)
		c.Spec.RTNIC = &isov1.RTNIC{NetworkName: network, Deadline: metav1.Duration{Duration: deadline}, MinBandwidth: resource.MustParse("10M")}
		if err := env.Client.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	c.Status.Sizing = &isov1.Sizing{VCPUs: 1, HostCPUs: 2, CPURequest: resource.MustParse("2"), Memory: resource.MustParse("1Gi")}
	c.Status.Placement = &isov1.PlacementStatus{Node: node}
	if err := env.Client.Status().Update(ctx, c); err != nil {
		t.Fatal(err)
	}
}

// setup creates namespace ns with a bridge network per name (name -> bridge) and
// registers the nodes.
func setup(t *testing.T, ns string, nodes []string, bridges map[string]string) {
	t.Helper()
	ctx := context.Background()
	objs := []client.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}}
	for name, bridge := range bridges {
		objs = append(objs, &nadv1.NetworkAttachmentDefinition{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: nadv1.NetworkAttachmentDefinitionSpec{Config: `{"cniVersion":"0.3.1","type":"bridge","bridge":"` + bridge + `"}`}})
	}
	for _, o := range objs {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range nodes {
		if err := testenv.RegisterNode(ctx, env.Client, testenv.RTNode(n, 16)); err != nil {
			t.Fatal(err)
		}
	}
}

// eventually polls cond until it holds (30 s at most); state says what was seen.
func eventually(t *testing.T, what string, cond func() (ok bool, state string)) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not %s after 30s: %s", what, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// hasEvent says whether ns has an Event of reason on the object named name that match
// accepts (any, when nil).
func hasEvent(ns, name, reason string, match func(corev1.Event) bool) (bool, string) {
	var events corev1.EventList
	if err := env.Client.List(context.Background(), &events, client.InNamespace(ns)); err != nil {
		return false, err.Error()
	}
	return slices.ContainsFunc(events.Items, func(e corev1.Event) bool {
		return e.InvolvedObject.Name == name && e.Reason == reason && (match == nil || match(e))
	}), fmt.Sprintf("%d Events in %s", len(events.Items), ns)
}

func waitSchedule(t *testing.T, h *host, want string) {
	t.Helper()
	eventually(t, "host schedule "+want, func() (bool, string) { return h.schedule() == want, h.schedule() })
}

func TestAgentFollowsTheCrawlersOfItsNode(t *testing.T) {
	ctx := context.Background()
	const ns = "tenant-a"
	setup(t, ns, []string{"agent-1", "agent-2"}, map[string]string{"rt-net": "br-rt", "rt-lonely": "br-none"})
	h := newHost(map[string]string{"br-rt": "eth1"})
	stop := agent(t, "agent-1", h, nil)

	place(t, ns, "a", "rt-net", "agent-1")
	waitSchedule(t, h, "eth1="+ns+"/a")
	// No ContentionProfile selects the node: the model's default link, 1 Gbit/s, shaped
	// to 95%.
	h.mu.Lock()
	if h.rate != 950_000_000 {
		t.Errorf("shaped to %d bits/s without a profile, want 950,000,000", h.rate)
	}
	h.mu.Unlock()
	place(t, ns, "b", "rt-net", "agent-1")
	place(t, ns, "elsewhere", "rt-net", "agent-2")
	waitSchedule(t, h, "eth1="+ns+"/a,"+ns+"/b")

	// Moved away: its class goes.
	place(t, ns, "a", "rt-net", "agent-2")
	waitSchedule(t, h, "eth1="+ns+"/b")

	// Restarted: the agent rebuilds the schedule from the API, including what changed
	// while it was down, and takes its schedule off a link whose crawlers all left.
	stop()
	if err := env.Client.Delete(ctx, &isov1.CrawlerVM{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "b"}}); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	h.links["eth9"] = []string{"left-over"} // isochron's schedule on a link no network uses now
	h.mu.Unlock()
	agent(t, "agent-1", h, nil)
	waitSchedule(t, h, "")
	place(t, ns, "c", "rt-net", "agent-1")
	waitSchedule(t, h, "eth1="+ns+"/c")

	// A network whose bridge has no port here is reported on the Node, not crashed on.
	place(t, ns, "d", "rt-lonely", "agent-1")
	eventually(t, "an RTUplinkUnavailable Event on node agent-1", func() (bool, string) {
		return hasEvent("default", "agent-1", isov1.EventReasonRTUplinkUnavailable, func(e corev1.Event) bool {
			return strings.Contains(e.Message, "bridge br-none") && strings.Contains(e.Message, isov1.AnnotationRTUplink)
		})
	})
	if got := h.schedule(); got != "eth1="+ns+"/c" {
		t.Errorf("schedule %q after the unavailable uplink, want eth1=%s/c", got, ns)
	}
}

// A tenant's network cannot choose the host interface the root agent reshapes: only the
// uplinks the administrator named are ever programmed. A network that names the node's
// primary NIC (with the annotation, or by its bridge) gets nothing on the host, and its
// crawler says why; a network on a named uplink is scheduled as before.
func TestAgentProgramsOnlyTheUplinksTheAdministratorNamed(t *testing.T) {
	ctx := context.Background()
	const ns, node = "tenant-u", "agent-u"
	setup(t, ns, []string{node}, map[string]string{"rt-net": "br-rt", "via-bridge": "br-primary"})
	primary := &nadv1.NetworkAttachmentDefinition{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "via-annotation", Annotations: map[string]string{isov1.AnnotationRTUplink: "eth0"}},
		Spec:       nadv1.NetworkAttachmentDefinitionSpec{Config: `{"cniVersion":"0.3.1","type":"bridge","bridge":"br-rt"}`},
	}
	if err := env.Client.Create(ctx, primary); err != nil {
		t.Fatal(err)
	}
	h := newHost(map[string]string{"br-rt": "eth1", "br-primary": "eth0"})
	agentWith(t, node, h, nil, []string{"eth1"})

	place(t, ns, "ok", "rt-net", node)
	place(t, ns, "annotated", "via-annotation", node)
	place(t, ns, "bridged", "via-bridge", node)
	waitSchedule(t, h, "eth1="+ns+"/ok")
	crawlerStatus(t, ns, "ok", "scheduled on eth1", func(s *isov1.RTNICStatus) bool { return s.Uplink == "eth1" && s.NotScheduled == "" })
	for _, name := range []string{"annotated", "bridged"} {
		c := crawlerStatus(t, ns, name, "not scheduled", func(s *isov1.RTNICStatus) bool { return s.NotScheduled != "" })
		msg := c.Status.RTNIC.NotScheduled
		if c.Status.RTNIC.Uplink != "" || !strings.Contains(msg, "host interface eth0") || !strings.Contains(msg, "not one of the RT uplinks the cluster administrator named (eth1)") ||
			!strings.Contains(msg, "rtUplinks") {
			t.Errorf("%s: status.rtNIC %+v; want no uplink and a notScheduled naming eth0, the named eth1 and rtUplinks", name, c.Status.RTNIC)
		}
		eventually(t, name+": an Event "+isov1.EventReasonRTNICNotScheduled, func() (bool, string) {
			return hasEvent(ns, name, isov1.EventReasonRTNICNotScheduled, func(e corev1.Event) bool { return strings.Contains(e.Message, "eth0") })
		})
	}
	h.mu.Lock()
	if h.touched["eth0"] {
		t.Error("the agent programmed eth0, an interface the administrator did not name")
	}
	h.mu.Unlock()

	// The network deleted under the scheduled crawler: its VMI keeps the RT-NIC, and its
	// traffic keeps its schedule on the uplink it had.
	if err := env.Client.Delete(ctx, &nadv1.NetworkAttachmentDefinition{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rt-net"}}); err != nil {
		t.Fatal(err)
	}
	h.waitApplies(t, 3)
	if got := h.schedule(); got != "eth1="+ns+"/ok" {
		t.Errorf("schedule %q after the network was deleted, want eth1=%s/ok kept", got, ns)
	}
}

// crawlerStatus waits until the crawler's status.rtNIC satisfies cond.
func crawlerStatus(t *testing.T, ns, name, what string, cond func(*isov1.RTNICStatus) bool) *isov1.CrawlerVM {
	t.Helper()
	c := &isov1.CrawlerVM{}
	eventually(t, ns+"/"+name+": "+what, func() (bool, string) {
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, c); err != nil {
			return false, err.Error()
		}
		return c.Status.RTNIC != nil && cond(c.Status.RTNIC), fmt.Sprintf("status.rtNIC %+v", c.Status.RTNIC)
	})
	return c
}

// TestFeedbackRaisesAndLowersAFlow: drops in a flow's class on the host raise it one
// class (status, Event, and the host's schedule); a probe within the deadline, once
// the interval has passed, lowers it again.
func TestFeedbackRaisesAndLowersAFlow(t *testing.T) {
	ctx := context.Background()
	const ns = "tenant-f"
	setup(t, ns, []string{"agent-f"}, map[string]string{"rt-net": "br-rt"})
	clk := clocktesting.NewFakePassiveClock(time.Now())
	h := newHost(map[string]string{"br-rt": "eth3"})
	agent(t, "agent-f", h, clk)
	key := ns + "/f"
	placeWithDeadline(t, ns, "f", "rt-net", "agent-f", 10*time.Millisecond)
	crawlerStatus(t, ns, "f", "class AF41 (its 10ms deadline's)", func(s *isov1.RTNICStatus) bool { return s.Class == "AF41" && s.Raise == 0 })

	h.drop(key, 7)
	c := crawlerStatus(t, ns, "f", "raised to EF", func(s *isov1.RTNICStatus) bool { return s.Class == "EF" && s.Raise == 1 })
	if want := "raised to EF: the host dropped 7 packets of its class on eth3"; c.Status.RTNIC.Message != want {
		t.Errorf("message %q, want %q", c.Status.RTNIC.Message, want)
	}
	eventually(t, "the host scheduling "+key+" raised", func() (bool, string) { return h.raise(key) == 1, fmt.Sprint(h.raise(key)) })
	if ok, state := hasEvent(ns, "f", isov1.EventReasonRTNICRaised, nil); !ok {
		t.Errorf("no %s Event on the crawler: %s", isov1.EventReasonRTNICRaised, state)
	}

	// A clean probe before the interval has passed changes nothing; after it, lowers.
	probe := func(job string) {
		t.Helper()
		c := &isov1.CrawlerVM{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "f"}, c); err != nil {
			t.Fatal(err)
		}
		ms := func(n int) metav1.Duration { return metav1.Duration{Duration: time.Duration(n) * time.Millisecond} }
		c.Status.LastProbe = &isov1.ProbeResult{Job: job, Trigger: isov1.TriggerSchedule, ObservedGeneration: c.Generation,
			StartTime: metav1.Now(), Verdict: isov1.VerdictConfirmed,
			RTNIC: &isov1.MeasuredRoundTrips{Sent: 300, Misses: 0, Deadline: ms(10), P99: ms(2), AtObjective: ms(3), Max: ms(3)}}
		if err := env.Client.Status().Update(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	probe("f-probe-1")
	crawlerStatus(t, ns, "f", "the clean probe counted, still raised", func(s *isov1.RTNICStatus) bool { return s.Evidence == "probe/f-probe-1" && s.Raise == 1 })
	clk.SetTime(clk.Now().Add(11 * time.Minute))
	probe("f-probe-2")
	crawlerStatus(t, ns, "f", "lowered to AF41", func(s *isov1.RTNICStatus) bool { return s.Class == "AF41" && s.Raise == 0 })
}
