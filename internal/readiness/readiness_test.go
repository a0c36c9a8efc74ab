package readiness

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/move"
)

func vm(opts ...func(*kubevirtv1.VirtualMachine)) *kubevirtv1.VirtualMachine {
	v := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "tower-a"}}
	v.Spec.RunStrategy = ptr.To(kubevirtv1.RunStrategyAlways)
	for _, o := range opts {
		o(v)
	}
	return v
}

func vmi(phase kubevirtv1.VirtualMachineInstancePhase, opts ...func(*kubevirtv1.VirtualMachineInstance)) *kubevirtv1.VirtualMachineInstance {
	v := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "tower-a", UID: "vmi-1"}}
	v.Status.Phase, v.Status.NodeName = phase, "rt-1"
	for _, o := range opts {
		o(v)
	}
	return v
}

func crashLooping(v *kubevirtv1.VirtualMachine) {
	v.Status.StartFailure = &kubevirtv1.VirtualMachineStartFailure{ConsecutiveFailCount: 2, LastFailedVMIUID: "vmi-0",
		RetryAfterTimestamp: &metav1.Time{Time: time.Date(2026, 11, 25, 12, 0, 40, 0, time.UTC)}}
}

func halted(v *kubevirtv1.VirtualMachine) { v.Spec.RunStrategy = ptr.To(kubevirtv1.RunStrategyHalted) }

func deleting(v *kubevirtv1.VirtualMachineInstance) {
	v.DeletionTimestamp = &metav1.Time{Time: time.Now()}
}

func refused(v *kubevirtv1.VirtualMachineInstance) {
	v.Status.Conditions = append(v.Status.Conditions, kubevirtv1.VirtualMachineInstanceCondition{
		Type: kubevirtv1.VirtualMachineInstanceSynchronized, Status: corev1.ConditionFalse, Reason: FailedCreate,
		Message:            `pods "virt-launcher-tower-a-x" is forbidden: exceeded quota: rt`,
		LastTransitionTime: metav1.Time{Time: time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)},
	})
}

func unschedulablePod(vmiUID string) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "virt-launcher-tower-a-x", Labels: map[string]string{kubevirtv1.CreatedByLabel: vmiUID}},
		Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/1 nodes are available: 1 Insufficient cpu."}}}}
}

// Each check of the chain, and whether it leaves the crawler stuck (kstatus' Stalled).
func TestJudge(t *testing.T) {
	cases := map[string]struct {
		s      Scope
		reason string
		ok     bool
		stuck  bool
		msg    string // a part of the message
	}{
		"running":                                  {s: Scope{VM: vm(), VMI: vmi(kubevirtv1.Running)}, reason: isov1.ReasonVMIRunning, ok: true},
		"scheduling":                               {s: Scope{VM: vm(), VMI: vmi(kubevirtv1.Scheduling)}, reason: isov1.ReasonVMIPending, msg: "is Scheduling"},
		"created, not scheduled yet":               {s: Scope{VM: vm(), VMI: vmi("")}, reason: isov1.ReasonVMIPending},
		"failed: KubeVirt restarts it":             {s: Scope{VM: vm(), VMI: vmi(kubevirtv1.Failed)}, reason: isov1.ReasonVMIFailed, msg: "KubeVirt starts a new one"},
		"a guest that shut down: restarted too":    {s: Scope{VM: vm(), VMI: vmi(kubevirtv1.Succeeded)}, reason: isov1.ReasonVMIFailed},
		"being deleted":                            {s: Scope{VM: vm(), VMI: vmi(kubevirtv1.Running, deleting)}, reason: isov1.ReasonVMIFailed, msg: "being deleted"},
		"no VMI yet":                               {s: Scope{VM: vm()}, reason: isov1.ReasonVMIPending, msg: "waiting for KubeVirt to start its VMI"},
		"crash loop: stuck":                        {s: Scope{VM: vm(crashLooping)}, reason: isov1.ReasonVMCrashLoop, stuck: true, msg: "at 2026-11-25T12:00:40Z"},
		"crash loop, its last VMI being deleted":   {s: Scope{VM: vm(crashLooping), VMI: vmi(kubevirtv1.Failed, deleting)}, reason: isov1.ReasonVMCrashLoop, stuck: true},
		"a new VMI of a crash loop is pending":     {s: Scope{VM: vm(crashLooping), VMI: vmi(kubevirtv1.Scheduling)}, reason: isov1.ReasonVMIPending},
		"stopped by a person: stuck":               {s: Scope{VM: vm(halted)}, reason: isov1.ReasonVMStopped, stuck: true, msg: "virtctl start tower-a"},
		"stopping":                                 {s: Scope{VM: vm(halted), VMI: vmi(kubevirtv1.Running, deleting)}, reason: isov1.ReasonVMStopped, stuck: true},
		"its launcher cannot be scheduled: stuck":  {s: Scope{VM: vm(), VMI: vmi(kubevirtv1.Scheduling), Launchers: []corev1.Pod{unschedulablePod("vmi-1")}, PlacedOn: "rt-1"}, reason: isov1.ReasonLauncherUnschedulable, stuck: true, msg: "Insufficient cpu"},
		"an old VMI's launcher is not this one's":  {s: Scope{VM: vm(), VMI: vmi(kubevirtv1.Scheduling), Launchers: []corev1.Pod{unschedulablePod("vmi-0")}}, reason: isov1.ReasonVMIPending},
		"its launcher refused by a quota: stuck":   {s: Scope{VM: vm(), VMI: vmi(kubevirtv1.Pending, refused)}, reason: isov1.ReasonLauncherRefused, stuck: true, msg: "exceeded quota"},
		"refused before, its launcher created now": {s: Scope{VM: vm(), VMI: vmi(kubevirtv1.Pending, refused), Launchers: []corev1.Pod{unschedulablePod("vmi-1")}, PlacedOn: "rt-1"}, reason: isov1.ReasonLauncherUnschedulable, stuck: true},
		"node lost: stuck until fenced": {s: Scope{VM: vm(), VMI: vmi(kubevirtv1.Running), Node: move.NodeState{Lost: true, Why: "node rt-1 has not been ready"}},
			reason: isov1.ReasonNodeLost, stuck: true, msg: "presumed down"},
		"node lost and fenced: progressing": {s: Scope{VM: vm(), VMI: vmi(kubevirtv1.Running), Node: move.NodeState{Lost: true, Fenced: true, Why: "node rt-1 was deleted"}},
			reason: isov1.ReasonNodeLost, msg: "starts the crawler on another node"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			v := Judge(tc.s)
			if v.Reason != tc.reason || v.OK != tc.ok || v.Stuck != tc.stuck || !strings.Contains(v.Message, tc.msg) {
				t.Errorf("Judge = %+v; want reason %s, ok %v, stuck %v, a message with %q", v, tc.reason, tc.ok, tc.stuck, tc.msg)
			}
		})
	}
}

// What keeps isochron from writing the VM: the first check of BeforeWrite that applies
// decides, and says whether a person must act.
func TestJudgeBeforeWrite(t *testing.T) {
	const crawler = types.UID("cvm-1")
	ours := []metav1.OwnerReference{{UID: crawler, Controller: ptr.To(true)}}
	vm := func(refs []metav1.OwnerReference) *kubevirtv1.VirtualMachine {
		return &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "c", OwnerReferences: refs}}
	}
	vmi := func(refs []metav1.OwnerReference, deleting bool) *kubevirtv1.VirtualMachineInstance {
		v := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "c", OwnerReferences: refs}}
		if deleting {
			v.DeletionTimestamp = &metav1.Time{Time: time.Now()}
		}
		return v
	}
	for name, tc := range map[string]struct {
		s       Scope
		reason  string // "" when the VM may be written
		stuck   bool
		message string
	}{
		"nothing in the way": {s: Scope{VM: vm(ours)}},
		"a network of another namespace, before anything else": {s: Scope{Network: Network{NotAllowed: errors.New("spec.rtNIC.networkName: not shared"), Missing: true}, RenderErr: errors.New("x")},
			reason: isov1.ReasonRTNetworkNotAllowed, stuck: true, message: "not shared"},
		"an uplink not named": {s: Scope{Network: Network{UplinkNotAllowed: errors.New(`uplink "eth0" is not an RT uplink`)}},
			reason: isov1.ReasonRTUplinkNotAllowed, stuck: true, message: "spec.rtNIC.networkName: uplink"},
		"a network that does not exist": {s: Scope{Network: Network{Key: "bms/rt-net", Missing: true}},
			reason: isov1.ReasonRTNetworkNotFound, stuck: true, message: "NetworkAttachmentDefinition bms/rt-net not found"},
		"a network deleted under a VM that runs: written on": {s: Scope{VM: vm(ours), Network: Network{Key: "bms/rt-net", Missing: true}}},
		"Multus not installed yet":                           {s: Scope{Network: Network{NoMultus: true}}, reason: isov1.ReasonMultusNotInstalled, message: "k8s.cni.cncf.io/v1"},
		"an invalid rendering":                               {s: Scope{RenderErr: errors.New("user data too long")}, reason: isov1.ReasonInvalid, stuck: true, message: "user data too long"},
		"another's VM of its name":                           {s: Scope{Crawler: crawler, VM: vm(nil)}, reason: isov1.ReasonInvalid, stuck: true, message: "a VirtualMachine named c exists"},
		"another's VMI before its VM":                        {s: Scope{Crawler: crawler, VMI: vmi(nil, false)}, reason: isov1.ReasonInvalid, stuck: true, message: "a VMI named c exists"},
		"its own bare VMI, being deleted":                    {s: Scope{Crawler: crawler, VMI: vmi(ours, true)}, reason: isov1.ReasonVMIReplacing, message: "waiting for VMI c to be deleted"},
		"its own bare VMI: adopted":                          {s: Scope{Crawler: crawler, VMI: vmi(ours, false)}},
		"the VM's VMI: judged later":                         {s: Scope{Crawler: crawler, VM: vm(ours), VMI: vmi([]metav1.OwnerReference{{UID: "vm", Controller: ptr.To(true)}}, true)}},
	} {
		t.Run(name, func(t *testing.T) {
			if tc.s.Crawler == "" {
				tc.s.Crawler = crawler
			}
			v, ok := JudgeBeforeWrite(tc.s)
			if ok != (tc.reason != "") || v.Reason != tc.reason || v.Stuck != tc.stuck || v.OK || !strings.Contains(v.Message, tc.message) {
				t.Errorf("JudgeBeforeWrite = %+v, %v; want reason %q, stuck %v, a message with %q", v, ok, tc.reason, tc.stuck, tc.message)
			}
		})
	}
	for name, tc := range map[string]struct {
		v     Verdict
		stuck bool
	}{
		"a restart under way": {Progress(isov1.ReasonVMIReplacing, "restarting"), false},
		"no node yet":         {NotPlaced("0/3 nodes fit"), false},
	} {
		if tc.v.Stuck != tc.stuck || tc.v.OK {
			t.Errorf("%s: %+v, want stuck %v", name, tc.v, tc.stuck)
		}
	}
}

// Whose VMI the crawler's readiness is judged on: its VM's, or one released to its VM and
// not adopted yet (an upgrade), never another's.
func TestVMIOf(t *testing.T) {
	const crawler = "cvm-1"
	owned := func(refs ...metav1.OwnerReference) func(*kubevirtv1.VirtualMachineInstance) {
		return func(v *kubevirtv1.VirtualMachineInstance) { v.OwnerReferences = refs }
	}
	theVM := vm(func(v *kubevirtv1.VirtualMachine) { v.UID = "vm-1" })
	byVM := metav1.OwnerReference{Kind: "VirtualMachine", Name: "tower-a", UID: "vm-1", Controller: ptr.To(true)}
	byCrawler := metav1.OwnerReference{Kind: "CrawlerVM", Name: "tower-a", UID: crawler}
	controlledByCrawler := metav1.OwnerReference{Kind: "CrawlerVM", Name: "tower-a", UID: crawler, Controller: ptr.To(true)}
	cases := map[string]struct {
		vm            *kubevirtv1.VirtualMachine
		vmi           *kubevirtv1.VirtualMachineInstance
		own, adopting bool
	}{
		"no VMI":                          {vm: theVM},
		"no VM yet":                       {vmi: vmi(kubevirtv1.Running, owned(controlledByCrawler))},
		"its VM's":                        {vm: theVM, vmi: vmi(kubevirtv1.Running, owned(byVM)), own: true},
		"released to its VM, not adopted": {vm: theVM, vmi: vmi(kubevirtv1.Running, owned(byCrawler)), own: true, adopting: true},
		"still the crawler's (a cache)":   {vm: theVM, vmi: vmi(kubevirtv1.Running, owned(controlledByCrawler)), own: true, adopting: true},
		"another's":                       {vm: theVM, vmi: vmi(kubevirtv1.Running, owned(metav1.OwnerReference{Kind: "VirtualMachine", Name: "tower-a", UID: "vm-0", Controller: ptr.To(true)}))},
		"nobody's":                        {vm: theVM, vmi: vmi(kubevirtv1.Running)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			own, adopting := VMIOf(tc.vm, tc.vmi, crawler)
			if (own != nil) != tc.own || adopting != tc.adopting {
				t.Errorf("VMIOf = %v, adopting %v; want own %v, adopting %v", own != nil, adopting, tc.own, tc.adopting)
			}
		})
	}
}

func TestRestartTurn(t *testing.T) {
	for name, tc := range map[string]struct {
		neighbours []Neighbour
		want       string
	}{
		"alone":                       {},
		"neighbours that run":         {neighbours: []Neighbour{{Key: "bms/a"}, {Key: "bms/z"}}},
		"one restarting: wait for it": {neighbours: []Neighbour{{Key: "bms/z", Restarting: true}}, want: "bms/z"},
		"an earlier one waits too: it goes first": {
			neighbours: []Neighbour{{Key: "bms/c", NeedsRestart: true}, {Key: "bms/a", NeedsRestart: true}}, want: "bms/a",
		},
		"a later one that waits: self goes first": {neighbours: []Neighbour{{Key: "bms/z", NeedsRestart: true}}},
		"self in the list is no neighbour":        {neighbours: []Neighbour{{Key: "bms/m", Restarting: true, NeedsRestart: true}}},
	} {
		t.Run(name, func(t *testing.T) {
			if got := RestartTurn("bms/m", tc.neighbours); got != tc.want {
				t.Errorf("RestartTurn = %q, want %q", got, tc.want)
			}
		})
	}
}

// A reservation goes after the bound only for a crawler a person stopped or whose
// launcher the API server refuses; any other way down keeps it.
func TestRelease(t *testing.T) {
	at := func(m int) time.Time { return time.Date(2026, 11, 25, 12, m, 0, 0, time.UTC) }
	down := func(reason string) *metav1.Condition {
		return &metav1.Condition{Type: isov1.ConditionReady, Status: metav1.ConditionFalse, Reason: reason}
	}
	cases := map[string]struct {
		ready   *metav1.Condition
		since   time.Time
		release bool
		wait    time.Duration
	}{
		"stopped within the bound":             {ready: down(isov1.ReasonVMStopped), since: at(0), wait: 4 * time.Minute},
		"stopped for the bound":                {ready: down(isov1.ReasonVMStopped), since: at(-4), release: true},
		"launcher refused within the bound":    {ready: down(isov1.ReasonLauncherRefused), since: at(5), wait: 9 * time.Minute},
		"launcher refused for longer":          {ready: down(isov1.ReasonLauncherRefused), since: at(-30), release: true},
		"a crash: KubeVirt restarts it":        {ready: down(isov1.ReasonVMIFailed), since: at(-30)},
		"crash loop: KubeVirt starts it again": {ready: down(isov1.ReasonVMCrashLoop), since: at(-30)},
		"node lost: the node's to fence":       {ready: down(isov1.ReasonNodeLost), since: at(-30)},
		"unschedulable: it moves":              {ready: down(isov1.ReasonLauncherUnschedulable), since: at(-30)},
		"running":                              {ready: &metav1.Condition{Type: isov1.ConditionReady, Status: metav1.ConditionTrue, Reason: isov1.ReasonVMIRunning}, since: at(-30)},
		"no Ready yet":                         {ready: nil, since: at(-30)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			release, wait := Release(tc.ready, tc.since, at(6), DefaultReleaseAfter)
			if release != tc.release || wait != tc.wait {
				t.Errorf("Release = %v, %s; want %v, %s", release, wait, tc.release, tc.wait)
			}
		})
	}
}

// Down since: the open outage of a crawler that ran, else KubeVirt's first refusal of
// its launcher, else when Ready turned.
func TestDownSince(t *testing.T) {
	at := func(m int) metav1.Time { return metav1.Time{Time: time.Date(2026, 11, 25, 12, m, 0, 0, time.UTC)} }
	ready := &metav1.Condition{Type: isov1.ConditionReady, Status: metav1.ConditionFalse, LastTransitionTime: at(7)}
	open := []isov1.Outage{{Cause: isov1.OutageStopped, Start: at(3)}, {Cause: isov1.OutageCrash, Start: at(1), End: ptr.To(at(2))}}
	closed := open[1:]
	cases := map[string]struct {
		ready   *metav1.Condition
		outages []isov1.Outage
		vmi     *kubevirtv1.VirtualMachineInstance
		want    time.Time
	}{
		"ran and stopped: its outage":              {ready: ready, outages: open, vmi: vmi(kubevirtv1.Pending, refused), want: at(3).Time},
		"never ran, its launcher refused":          {ready: ready, outages: closed, vmi: vmi(kubevirtv1.Pending, refused), want: at(0).Time},
		"never ran, no refusal: when Ready turned": {ready: ready, vmi: vmi(kubevirtv1.Pending), want: at(7).Time},
		"Ready: not down":                          {ready: &metav1.Condition{Status: metav1.ConditionTrue}, outages: open},
		"no Ready condition: not known to be down": {},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := DownSince(tc.ready, tc.outages, tc.vmi); !got.Equal(tc.want) {
				t.Errorf("DownSince = %s, want %s", got, tc.want)
			}
		})
	}
}
