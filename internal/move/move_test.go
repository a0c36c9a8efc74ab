package move

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/render"
)

var t0 = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

// vmi is a crawler's VMI running on node and pinned to pinned.
func vmi(node, pinned string, opts ...func(*kubevirtv1.VirtualMachineInstance)) *kubevirtv1.VirtualMachineInstance {
	v := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "tower-a"}}
	v.Spec.Affinity = render.Affinity(pinned)
	v.Status.Phase, v.Status.NodeName = kubevirtv1.Running, node
	for _, o := range opts {
		o(v)
	}
	return v
}

func notMigratable(v *kubevirtv1.VirtualMachineInstance) {
	v.Status.Conditions = append(v.Status.Conditions, kubevirtv1.VirtualMachineInstanceCondition{
		Type: kubevirtv1.VirtualMachineInstanceIsMigratable, Status: corev1.ConditionFalse, Reason: "InterfaceNotLiveMigratable", Message: "bridge binding"})
}

func migratingSince(start time.Time) func(*kubevirtv1.VirtualMachineInstance) {
	return func(v *kubevirtv1.VirtualMachineInstance) {
		v.Status.MigrationState = &kubevirtv1.VirtualMachineInstanceMigrationState{StartTimestamp: &metav1.Time{Time: start}}
	}
}

func migratedIn(d time.Duration) func(*kubevirtv1.VirtualMachineInstance) {
	return func(v *kubevirtv1.VirtualMachineInstance) {
		v.Status.MigrationState = &kubevirtv1.VirtualMachineInstanceMigrationState{
			StartTimestamp: &metav1.Time{Time: t0}, EndTimestamp: &metav1.Time{Time: t0.Add(d)}, Completed: true}
	}
}

func migration(phase kubevirtv1.VirtualMachineInstanceMigrationPhase, reason string) *kubevirtv1.VirtualMachineInstanceMigration {
	m := &kubevirtv1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Name: "tower-a-move-1"}}
	m.Status.Phase = phase
	if reason != "" {
		m.Status.MigrationState = &kubevirtv1.VirtualMachineInstanceMigrationState{Failed: true, FailureReason: reason}
	}
	return m
}

// readOnlyAgentDisk gives the VMI the agent disk as earlier releases rendered it: read-only.
func readOnlyAgentDisk(v *kubevirtv1.VirtualMachineInstance) {
	v.Spec.Domain.Devices.Disks = append(v.Spec.Domain.Devices.Disks, kubevirtv1.Disk{Name: render.VolumeAgent,
		DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: kubevirtv1.DiskBusVirtio, ReadOnly: true}}})
	v.Spec.Volumes = append(v.Spec.Volumes, kubevirtv1.Volume{Name: render.VolumeAgent,
		VolumeSource: kubevirtv1.VolumeSource{ContainerDisk: &kubevirtv1.ContainerDiskSource{Image: "isochron/rtprobe:v0.1.0"}}})
}

// failedIn is a VMI whose migration state records migration uid as failed with reason.
func failedIn(uid types.UID, reason string) func(*kubevirtv1.VirtualMachineInstance) {
	return func(v *kubevirtv1.VirtualMachineInstance) {
		v.Status.MigrationState = &kubevirtv1.VirtualMachineInstanceMigrationState{
			MigrationUID: uid, StartTimestamp: &metav1.Time{Time: t0}, EndTimestamp: &metav1.Time{Time: t0}, Failed: true, FailureReason: reason}
	}
}

func withUID(m *kubevirtv1.VirtualMachineInstanceMigration, uid types.UID) *kubevirtv1.VirtualMachineInstanceMigration {
	m.UID = uid
	return m
}

func TestNextStep(t *testing.T) {
	live := &isov1.Move{Reason: isov1.MoveRefuted, Mode: isov1.MoveLive, From: "a", To: "b"}
	started := &isov1.Move{Reason: isov1.MoveRefuted, Mode: isov1.MoveLive, From: "a", To: "b", Migration: "tower-a-move-1"}
	cold := &isov1.Move{Reason: isov1.MoveRefuted, Mode: isov1.MoveCold, From: "a", To: "b", Message: "not live-migratable"}
	deleting := vmi("a", "b", func(v *kubevirtv1.VirtualMachineInstance) { v.DeletionTimestamp = &metav1.Time{Time: t0} })
	cases := map[string]struct {
		st   State
		want Next
		// why is a part of Next.Why, "" to leave it unchecked.
		why string
	}{
		"the VMI still pinned to the old node waits for LiveUpdate": {st: State{Move: live, VMI: vmi("a", "a")}, want: Next{Step: Wait}, why: "pin VMI tower-a to node b"},
		"pinned to the new node: migrate":                           {st: State{Move: live, VMI: vmi("a", "b")}, want: Next{Step: Migrate}},
		"a migration of another's in flight waits":                  {st: State{Move: live, VMI: vmi("a", "b", migratingSince(t0))}, want: Next{Step: Wait}, why: "another migration"},
		"another's migration not handed off yet waits, not refused": {st: State{Move: live, VMI: vmi("a", "b"), InFlight: named(migration(kubevirtv1.MigrationPending, ""), "virtctl-1")}, want: Next{Step: Wait}, why: "migration virtctl-1 of VMI tower-a has not ended (Pending)"},
		"not live-migratable: cold":                                 {st: State{Move: live, VMI: vmi("a", "b", notMigratable)}, want: Next{Step: Restart, Cold: true}, why: "not live-migratable (InterfaceNotLiveMigratable: bridge binding)"},
		"a read-only agent disk of an earlier release: cold":        {st: State{Move: live, VMI: vmi("a", "a", readOnlyAgentDisk)}, want: Next{Step: Restart, Cold: true}, why: "read-only disk isochron-agent"},
		"a restart required stops LiveUpdate: cold":                 {st: State{Move: live, VMI: vmi("a", "a"), RestartRequired: true}, want: Next{Step: Restart, Cold: true}, why: "requires a restart"},
		"the migration runs":                                        {st: State{Move: started, VMI: vmi("a", "b", migratingSince(t0)), Migration: migration(kubevirtv1.MigrationRunning, "")}, want: Next{Step: Wait}, why: "is Running"},
		"the migration failed":                                      {st: State{Move: started, VMI: vmi("a", "b"), Migration: migration(kubevirtv1.MigrationFailed, "target pod unschedulable")}, want: Next{Step: Fail}, why: "target pod unschedulable"},
		"the VMI's state has the reason the migration lacks":        {st: State{Move: started, VMI: vmi("a", "b", failedIn("mig-uid", "Cannot migrate empty or read-only disk vdb")), Migration: withUID(migration(kubevirtv1.MigrationFailed, ""), "mig-uid")}, want: Next{Step: Fail}, why: "read-only disk vdb"},
		"another migration's reason in the VMI is not this one's":   {st: State{Move: started, VMI: vmi("a", "b", failedIn("old-uid", "an older failure")), Migration: withUID(migration(kubevirtv1.MigrationFailed, ""), "mig-uid")}, want: Next{Step: Fail}, why: "KubeVirt gives no reason"},
		"the migration was deleted":                                 {st: State{Move: started, VMI: vmi("a", "b")}, want: Next{Step: Fail}, why: "was deleted"},
		"succeeded, the VMI not there yet waits":                    {st: State{Move: started, VMI: vmi("a", "b"), Migration: migration(kubevirtv1.MigrationSucceeded, "")}, want: Next{Step: Wait}},
		"arrived: done, with KubeVirt's time":                       {st: State{Move: started, VMI: vmi("b", "b", migratedIn(3*time.Second))}, want: Next{Step: Done, MigrationTime: 3 * time.Second}},
		"a cold move restarts a running VMI":                        {st: State{Move: cold, VMI: vmi("a", "b")}, want: Next{Step: Restart, Cold: true}},
		"a cold move that arrived is done":                          {st: State{Move: cold, VMI: vmi("b", "b")}, want: Next{Step: Done}},
		"no VMI: KubeVirt starts it on the new node":                {st: State{Move: live, VMI: nil}, want: Next{Step: Wait, Cold: true}, why: "start the VMI on node b"},
		"a VMI being deleted waits":                                 {st: State{Move: cold, VMI: deleting}, want: Next{Step: Wait}},
		"a pending VMI pinned to the new node waits":                {st: State{Move: live, VMI: vmi("", "b", func(v *kubevirtv1.VirtualMachineInstance) { v.Status.Phase = kubevirtv1.Scheduling })}, want: Next{Step: Wait, Cold: true}},
		"a failed VMI on the old node restarts":                     {st: State{Move: live, VMI: vmi("a", "a", func(v *kubevirtv1.VirtualMachineInstance) { v.Status.Phase = kubevirtv1.Failed })}, want: Next{Step: Restart, Cold: true}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := NextStep(tc.st)
			if tc.why != "" && !strings.Contains(got.Why, tc.why) {
				t.Errorf("Why = %q, want it to contain %q", got.Why, tc.why)
			}
			got.Why = ""
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("NextStep (-want +got):\n%s", diff)
			}
		})
	}
}

// A migration of the VMI that has not ended, as KubeVirt's admission counts them.
func TestInFlight(t *testing.T) {
	of := func(vmi, name string, phase kubevirtv1.VirtualMachineInstanceMigrationPhase, deleting bool) kubevirtv1.VirtualMachineInstanceMigration {
		m := kubevirtv1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: kubevirtv1.VirtualMachineInstanceMigrationSpec{VMIName: vmi}}
		m.Status.Phase = phase
		if deleting {
			m.DeletionTimestamp = &metav1.Time{Time: t0}
		}
		return m
	}
	cases := map[string]struct {
		migs []kubevirtv1.VirtualMachineInstanceMigration
		want string
	}{
		"none":                          {},
		"ended ones":                    {migs: []kubevirtv1.VirtualMachineInstanceMigration{of("tower-a", "m1", kubevirtv1.MigrationSucceeded, false), of("tower-a", "m2", kubevirtv1.MigrationFailed, false)}},
		"another VMI's":                 {migs: []kubevirtv1.VirtualMachineInstanceMigration{of("tower-b", "m1", kubevirtv1.MigrationRunning, false)}},
		"pending":                       {migs: []kubevirtv1.VirtualMachineInstanceMigration{of("tower-a", "m1", "", false)}, want: "m1"},
		"being deleted, not failed yet": {migs: []kubevirtv1.VirtualMachineInstanceMigration{of("tower-a", "m1", kubevirtv1.MigrationScheduling, true)}, want: "m1"},
		"running, after an ended one":   {migs: []kubevirtv1.VirtualMachineInstanceMigration{of("tower-a", "m1", kubevirtv1.MigrationFailed, false), of("tower-a", "m2", kubevirtv1.MigrationRunning, false)}, want: "m2"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var got string
			if m := InFlight(tc.migs, "tower-a"); m != nil {
				got = m.Name
			}
			if got != tc.want {
				t.Errorf("InFlight = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	for n, want := range map[int32]time.Duration{1: time.Minute, 2: 2 * time.Minute, 5: 16 * time.Minute, 6: 30 * time.Minute, 40: 30 * time.Minute} {
		if got := Backoff(n); got != want {
			t.Errorf("Backoff(%d) = %s, want %s", n, got, want)
		}
	}
	failed := &isov1.MoveRecord{Result: isov1.MoveFailed, RetryAfter: &metav1.Time{Time: t0.Add(time.Minute)}}
	if got := RetryWait(failed, t0); got != time.Minute {
		t.Errorf("RetryWait = %s, want 1m", got)
	}
	if got := RetryWait(failed, t0.Add(2*time.Minute)); got != 0 {
		t.Errorf("RetryWait after the backoff = %s, want 0", got)
	}
	if got := RetryWait(&isov1.MoveRecord{Result: isov1.MoveSucceeded}, t0); got != 0 {
		t.Errorf("RetryWait after a success = %s", got)
	}
}

// A node that refuted a crawler is remembered for the memory, once (its newest
// refutation), newest first, at most MaxRefutations of them; the moves avoid them.
func TestRememberRefutations(t *testing.T) {
	ref := func(node string, ago time.Duration) isov1.Refutation {
		return isov1.Refutation{Node: node, Job: "probe-" + node, Time: metav1.NewTime(t0.Add(-ago))}
	}
	nodes := func(list []isov1.Refutation) []string {
		var out []string
		for _, r := range list {
			out = append(out, r.Node)
		}
		return out
	}
	list := Remember(nil, ref("a", 3*time.Hour), t0, DefaultRefutedMemory)
	list = Remember(list, ref("b", 2*time.Hour), t0, DefaultRefutedMemory)
	list = Remember(list, ref("a", 0), t0, DefaultRefutedMemory)
	if diff := cmp.Diff([]string{"a", "b"}, nodes(list)); diff != "" {
		t.Errorf("nodes (-want +got):\n%s", diff)
	}
	old := Remember([]isov1.Refutation{ref("x", 25*time.Hour)}, ref("y", 0), t0, DefaultRefutedMemory)
	if diff := cmp.Diff([]string{"y"}, nodes(old)); diff != "" {
		t.Errorf("a refutation older than the memory is kept (-want +got):\n%s", diff)
	}
	var many []isov1.Refutation
	for i := range 12 {
		many = Remember(many, ref(string(rune('a'+i)), time.Duration(12-i)*time.Minute), t0, DefaultRefutedMemory)
	}
	if len(many) != MaxRefutations || many[0].Node != "l" {
		t.Errorf("kept %v, want the newest %d", nodes(many), MaxRefutations)
	}
	avoid := Avoid([]isov1.Refutation{ref("a", time.Hour), ref("b", 25*time.Hour)}, t0, DefaultRefutedMemory)
	if len(avoid) != 1 || avoid[0].Node != "a" || !strings.Contains(avoid[0].Why, "probe Job probe-a refuted") {
		t.Errorf("Avoid = %+v, want node a only, with the probe", avoid)
	}
}

func TestNode(t *testing.T) {
	const grace = time.Minute
	notReadyAt := t0.Add(-2 * time.Minute)
	notReady := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown", LastTransitionTime: metav1.Time{Time: notReadyAt},
	}}}}
	justNotReady := notReady.DeepCopy()
	justNotReady.Status.Conditions[0].LastTransitionTime = metav1.Time{Time: t0.Add(-20 * time.Second)}
	ready := notReady.DeepCopy()
	ready.Status.Conditions[0].Status = corev1.ConditionTrue
	fenced := notReady.DeepCopy()
	fenced.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeOutOfService, Effect: corev1.TaintEffectNoExecute}}
	cases := map[string]struct {
		node      *corev1.Node
		vmi       *kubevirtv1.VirtualMachineInstance
		lastRenew time.Time
		attested  bool
		want      NodeState
		why       string
	}{
		"ready":                                                {node: ready, vmi: vmi("a", "a"), want: NodeState{}},
		"not ready within the grace waits":                     {node: justNotReady, vmi: vmi("a", "a"), want: NodeState{Wait: 40 * time.Second}},
		"lost, no Lease: since NotReady":                       {node: notReady, vmi: vmi("a", "a"), want: NodeState{Lost: true, Since: notReadyAt}, why: "not been ready since"},
		"lost: since the last Lease renewal":                   {node: notReady, vmi: vmi("a", "a"), lastRenew: notReadyAt.Add(-50 * time.Second), want: NodeState{Lost: true, Since: notReadyAt.Add(-50 * time.Second)}, why: "last heard from at"},
		"a renewal after NotReady is not the start":            {node: notReady, vmi: vmi("a", "a"), lastRenew: notReadyAt.Add(time.Second), want: NodeState{Lost: true, Since: notReadyAt}},
		"lost, its VMI gone: fenced":                           {node: notReady, vmi: nil, lastRenew: notReadyAt.Add(-50 * time.Second), want: NodeState{Lost: true, Fenced: true, Since: notReadyAt.Add(-50 * time.Second)}, why: "launcher pod is gone"},
		"the out-of-service taint fences":                      {node: fenced, vmi: vmi("a", "a"), want: NodeState{Lost: true, Fenced: true}, why: "fenced (taint"},
		"deleted: lost, not fenced (the machine may run on)":   {node: nil, vmi: vmi("a", "a"), want: NodeState{Lost: true}, why: "does not stop its machine"},
		"deleted, its VMI gone (the pod GC): still not fenced": {node: nil, vmi: nil, want: NodeState{Lost: true}, why: "annotate the CrawlerVM isochron.io/fenced-node=a"},
		"deleted, and attested off":                            {node: nil, vmi: vmi("a", "a"), attested: true, want: NodeState{Lost: true, Fenced: true}, why: "its machine is off"},
		"an attestation does not fence a node that exists":     {node: notReady, vmi: vmi("a", "a"), attested: true, want: NodeState{Lost: true, Since: notReadyAt}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Node(tc.node, "a", tc.vmi, tc.lastRenew, t0, grace, tc.attested)
			if tc.why != "" && !strings.Contains(got.Why, tc.why) {
				t.Errorf("Why = %q, want it to contain %q", got.Why, tc.why)
			}
			got.Why = ""
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Node (-want +got):\n%s", diff)
			}
		})
	}
}

func named(m *kubevirtv1.VirtualMachineInstanceMigration, name string) *kubevirtv1.VirtualMachineInstanceMigration {
	m.Name = name
	return m
}

func TestAfterUnschedulable(t *testing.T) {
	since := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	ended := func(reason isov1.MoveReason, at time.Time) *isov1.MoveRecord {
		return &isov1.MoveRecord{Reason: reason, EndTime: metav1.NewTime(at)}
	}
	const grace, interval = time.Minute, time.Hour
	for _, tc := range []struct {
		name    string
		now     time.Time
		last    *isov1.MoveRecord
		wait    time.Duration
		moveNow bool
	}{
		{"within the grace", since.Add(20 * time.Second), nil, 40 * time.Second, false},
		{"the grace over", since.Add(grace), nil, 0, true},
		{"moved so within the interval: once", since.Add(2 * grace), ended(isov1.MoveNodeUnschedulable, since.Add(-time.Minute)), 0, false},
		{"moved so long ago", since.Add(2 * grace), ended(isov1.MoveNodeUnschedulable, since.Add(-2*interval)), 0, true},
		{"moved lately for another reason", since.Add(2 * grace), ended(isov1.MoveRefuted, since), 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wait, moveNow := AfterUnschedulable(since, tc.now, grace, tc.last, interval)
			if wait != tc.wait || moveNow != tc.moveNow {
				t.Errorf("AfterUnschedulable = %v, %v; want %v, %v", wait, moveNow, tc.wait, tc.moveNow)
			}
		})
	}
}
