package controllers_test

import (
	"context"
	"testing"

	"k8s.io/client-go/util/retry"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/render"
)

// agentImage is the image of the probe agent's disk in a VMI spec, "" for none.
func agentImage(spec *kubevirtv1.VirtualMachineInstanceSpec) string {
	for _, v := range spec.Volumes {
		if v.Name == render.VolumeAgent && v.ContainerDisk != nil {
			return v.ContainerDisk.Image
		}
	}
	return ""
}

// A new release's probe agent reaches a running crawler at its next restart, whoever
// restarts it: here a crash (the VMI Failed, which KubeVirt deletes and starts again from
// the VM's template; the test's finalizer holds the deleted VMI as a terminating launcher
// does). The running VMI is left alone: the template stays as an earlier release wrote it
// (another agent image) while the VMI runs, and is written anew while the crashed VMI
// goes, so that the next VMI has the manager's image. (The gateway's address comes with
// the guest Secret, which the next VMI reads when it starts.)
func TestNewAgentImageReachesTheNextVMI(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	createNode(t, rtNode("agent-1", "it", "agent-image"), 16)
	c := crawler(ns, "upgraded", withSelector("it", "agent-image"))
	if err := k8s.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKey{Namespace: ns, Name: "upgraded"}
	vmi := waitForVMI(t, key, func(*kubevirtv1.VirtualMachineInstance) bool { return true })
	setVMIPhase(t, vmi, kubevirtv1.Running, "agent-1")
	vm := &kubevirtv1.VirtualMachine{}
	vm.Namespace, vm.Name = ns, "upgraded"
	get(t, vm)
	const mine, earlier = "isochron/rtprobe:test", "isochron/rtprobe:v0.0.9"
	if got := agentImage(&vm.Spec.Template.Spec); got != mine {
		t.Fatalf("VM's agent image %q, want %q", got, mine)
	}

	// What an upgrade finds: the template as the earlier release wrote it (same inputs,
	// another agent), the VMI running from it.
	update(t, vm, func(vm *kubevirtv1.VirtualMachine) {
		for i, v := range vm.Spec.Template.Spec.Volumes {
			if v.Name == render.VolumeAgent {
				vm.Spec.Template.Spec.Volumes[i].ContainerDisk.Image = earlier
			}
		}
	})
	update(t, vmi, func(v *kubevirtv1.VirtualMachineInstance) {
		v.Finalizers = append(v.Finalizers, "test.isochron.io/launcher")
	})
	touch(t, vmi, "upgraded")
	waitForCrawler(t, c, "Ready with the earlier agent", func(c *isov1.CrawlerVM) bool {
		return c.Status.VMI != nil && c.Status.VMI.Phase == string(kubevirtv1.Running)
	})
	get(t, vm)
	if got := agentImage(&vm.Spec.Template.Spec); got != earlier {
		t.Fatalf("VM's agent image %q while its VMI runs, want the earlier release's %q kept (no restart asked for)", got, earlier)
	}

	// The guest crashes: KubeVirt deletes the VMI, which its launcher holds for a while.
	uid := vmi.UID
	setVMIPhase(t, vmi, kubevirtv1.Failed, "agent-1")
	eventually(t, "the VM's template has the manager's agent while the crashed VMI goes", func() (bool, string) {
		get(t, vm)
		got := agentImage(&vm.Spec.Template.Spec)
		return got == mine, "agent image " + got
	})
	update(t, vmi, func(v *kubevirtv1.VirtualMachineInstance) { v.Finalizers = nil })
	next := waitForVMI(t, key, func(v *kubevirtv1.VirtualMachineInstance) bool { return v.UID != uid })
	if got := agentImage(&next.Spec); got != mine {
		t.Errorf("next VMI's agent image %q, want %q", got, mine)
	}
}

// update changes obj by edit, read afresh until no one else wrote it meanwhile.
func update[T client.Object](t *testing.T, obj T, edit func(T)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		edit(obj)
		return k8s.Update(context.Background(), obj)
	})
	if err != nil {
		t.Fatal(err)
	}
}
