package controllers

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/inventory"
	"isochron.io/isochron/internal/model"
	"isochron.io/isochron/internal/readiness"
	"isochron.io/isochron/internal/render"
	"isochron.io/isochron/internal/sizing"
)

// Each cache transform keeps what isochron reads of its kind and drops the rest.
func TestCacheTransforms(t *testing.T) {
	meta := metav1.ObjectMeta{Name: "x", Namespace: "ns", UID: "u1", Generation: 3, ResourceVersion: "7", Labels: map[string]string{"l": "v"},
		OwnerReferences: []metav1.OwnerReference{{Kind: "CrawlerVM", Name: "x", UID: "c1", Controller: ptr.To(true)}}}
	affinity := render.Affinity("rt-1")
	volumes := []kubevirtv1.Volume{{Name: render.VolumeAgent, VolumeSource: kubevirtv1.VolumeSource{ContainerDisk: &kubevirtv1.ContainerDiskSource{Image: "agent:1"}}}}
	taints := []corev1.Taint{{Key: "t", Effect: corev1.TaintEffectNoSchedule}}
	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64")}
	conditions := []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	cases := map[string]struct {
		strip    func(interface{}) (interface{}, error)
		in, want interface{}
	}{
		"a VM keeps its metadata, status, run strategy and its template's metadata, affinity and volumes": {
			strip: stripVM,
			in: &kubevirtv1.VirtualMachine{ObjectMeta: meta,
				Spec: kubevirtv1.VirtualMachineSpec{RunStrategy: ptr.To(kubevirtv1.RunStrategyHalted),
					Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
						ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{isov1.AnnotationVMInputs: "h1"}, Labels: map[string]string{"l": "v"}},
						Spec: kubevirtv1.VirtualMachineInstanceSpec{Affinity: affinity, Volumes: volumes, Hostname: "x",
							Domain:   kubevirtv1.DomainSpec{CPU: &kubevirtv1.CPU{Cores: 4, DedicatedCPUPlacement: true}},
							Networks: []kubevirtv1.Network{{Name: "default"}}, NodeSelector: map[string]string{"n": "s"}}}},
				Status: kubevirtv1.VirtualMachineStatus{Conditions: []kubevirtv1.VirtualMachineCondition{{Type: kubevirtv1.VirtualMachineRestartRequired, Status: corev1.ConditionTrue}},
					StartFailure: &kubevirtv1.VirtualMachineStartFailure{ConsecutiveFailCount: 2}}},
			want: &kubevirtv1.VirtualMachine{ObjectMeta: meta,
				Spec: kubevirtv1.VirtualMachineSpec{RunStrategy: ptr.To(kubevirtv1.RunStrategyHalted),
					Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
						ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{isov1.AnnotationVMInputs: "h1"}, Labels: map[string]string{"l": "v"}},
						Spec:       kubevirtv1.VirtualMachineInstanceSpec{Affinity: affinity, Volumes: volumes}}},
				Status: kubevirtv1.VirtualMachineStatus{Conditions: []kubevirtv1.VirtualMachineCondition{{Type: kubevirtv1.VirtualMachineRestartRequired, Status: corev1.ConditionTrue}},
					StartFailure: &kubevirtv1.VirtualMachineStartFailure{ConsecutiveFailCount: 2}}},
		},
		"a VM without a template": {
			strip: stripVM,
			in:    &kubevirtv1.VirtualMachine{ObjectMeta: meta, Spec: kubevirtv1.VirtualMachineSpec{Running: ptr.To(true)}},
			want:  &kubevirtv1.VirtualMachine{ObjectMeta: meta, Spec: kubevirtv1.VirtualMachineSpec{Running: ptr.To(true)}},
		},
		"a node keeps its labels, taints, cordon, capacity, allocatable and conditions": {
			strip: stripNode,
			in: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"l": "v"}, Annotations: map[string]string{"a": "b"}},
				Spec: corev1.NodeSpec{Taints: taints, Unschedulable: true, PodCIDR: "10.0.0.0/24", ProviderID: "p"},
				Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity, Conditions: conditions,
					Images: []corev1.ContainerImage{{Names: []string{"big"}}}, Addresses: []corev1.NodeAddress{{Address: "10.0.0.1"}}}},
			want: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"l": "v"}},
				Spec:   corev1.NodeSpec{Taints: taints, Unschedulable: true},
				Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity, Conditions: conditions}},
		},
		"a migration keeps its metadata, spec and phase": {
			strip: stripMigration,
			in: &kubevirtv1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Name: "m", Annotations: map[string]string{"a": "b"}},
				Spec:   kubevirtv1.VirtualMachineInstanceMigrationSpec{VMIName: "x"},
				Status: kubevirtv1.VirtualMachineInstanceMigrationStatus{Phase: kubevirtv1.MigrationRunning, PhaseTransitionTimestamps: []kubevirtv1.VirtualMachineInstanceMigrationPhaseTransitionTimestamp{{Phase: kubevirtv1.MigrationRunning}}}},
			want: &kubevirtv1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Name: "m"},
				Spec:   kubevirtv1.VirtualMachineInstanceMigrationSpec{VMIName: "x"},
				Status: kubevirtv1.VirtualMachineInstanceMigrationStatus{Phase: kubevirtv1.MigrationRunning}},
		},
		"another kind passes unchanged": {strip: stripVM, in: &corev1.Pod{Spec: corev1.PodSpec{NodeName: "n"}}, want: &corev1.Pod{Spec: corev1.PodSpec{NodeName: "n"}}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := tc.strip(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// What isochron decides from a VM it rendered, it decides the same from the cache's
// stripped copy: the write it plans, whether a VMI restarts, the run strategy.
func TestStrippedVMReadsTheSame(t *testing.T) {
	cvm := &isov1.CrawlerVM{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "c1"},
		Spec: isov1.CrawlerVMSpec{RPS: 400, CPUPlacement: isov1.CPUPlacementDedicated,
			ErrorBudget: isov1.ErrorBudget{Tolerance: metav1.Duration{Duration: 10 * time.Millisecond}, Objective: "99.999"},
			Guest:       isov1.Guest{Image: "crawler:1", Memory: resource.MustParse("2Gi"), CloudInitUserData: "#cloud-config\n"},
			RTNIC:       &isov1.RTNIC{NetworkName: "ns/rt", Deadline: metav1.Duration{Duration: 5 * time.Millisecond}, MinBandwidth: resource.MustParse("100M")}}}
	size, err := sizing.Size(inventory.Demand(&cvm.Spec), model.DefaultParams())
	if err != nil {
		t.Fatal(err)
	}
	base := render.Input{CrawlerVM: cvm, Sizing: size, Node: "rt-1", RTBinding: render.BindingBridge,
		Agent: &render.Agent{Image: "agent:1", Gateways: []string{"http://10.0.0.1:8080"}, Key: []byte("k")}}
	vm, err := render.VM(base)
	if err != nil {
		t.Fatal(err)
	}
	vm.Status.Conditions = []kubevirtv1.VirtualMachineCondition{{Type: kubevirtv1.VirtualMachineRestartRequired, Status: corev1.ConditionTrue}}
	stripped, err := stripVM(vm.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	svm := stripped.(*kubevirtv1.VirtualMachine)
	moved, bigger, agent := base, base, base
	moved.Node = "rt-2"
	bigger.Sizing.VCPUs++
	agent.Agent = &render.Agent{Image: "agent:2", Gateways: base.Agent.Gateways, Key: base.Agent.Key}
	for name, in := range map[string]render.Input{"the same inputs": base, "moved": moved, "bigger": bigger, "another agent": agent} {
		for _, stopped := range []bool{false, true} {
			if want, got := render.PlanVMWrite(vm, in, stopped), render.PlanVMWrite(svm, in, stopped); got != want {
				t.Errorf("%s, stopped %v: PlanVMWrite of the stripped VM = %v, of the whole %v", name, stopped, got, want)
			}
		}
	}
	vmi := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{isov1.AnnotationVMInputs: "older"}}}
	if want, got := restartForInputs(vm, vmi), restartForInputs(svm, vmi); got != want || !want {
		t.Errorf("restartForInputs of the stripped VM = %v, of the whole %v (want true)", got, want)
	}
	if want, got := readiness.Judge(readiness.Scope{VM: vm}), readiness.Judge(readiness.Scope{VM: svm}); got != want {
		t.Errorf("readiness of the stripped VM = %+v, of the whole %+v", got, want)
	}
}
