package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

// quantity is q's value in the status, "" when absent.
func quantity(q *resource.Quantity) string {
	if q == nil {
		return ""
	}
	return q.String()
}

// Placement counts what a launcher's support containers request, as the cluster's
// KubeVirt resource sizes them: KubeVirt's defaults without one (a dedicated crawler's
// two container disks and console log: 35m, 140M); with the local node VMs'
// configuration (300m per container disk, no console log) 600m, which a placed crawler
// takes into its reservation when it is next decided, on the node it runs on. A node with
// room for a crawler's exclusive CPUs but not for its support containers does not take
// it, and says so.
func TestPlacementCountsKubeVirtsSupportContainers(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	createNode(t, rtNode("sup-1", "it", "sup"), 16)
	c := crawler(ns, "counted", withSelector("it", "sup"))
	if err := k8s.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	vmi := waitForVMI(t, client.ObjectKeyFromObject(c), func(*kubevirtv1.VirtualMachineInstance) bool { return true })
	waitForCrawler(t, c, "placed on sup-1", func(c *isov1.CrawlerVM) bool { return c.Status.Placement != nil })
	if s := c.Status.Sizing; quantity(s.SupportCPU) != "35m" || quantity(s.SupportMemory) != "140M" {
		t.Errorf("status.sizing %+v: want KubeVirt's default support containers, 35m and 140M", s)
	}
	hostCPUs := c.Status.Sizing.HostCPUs

	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kubevirt"}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	kv := &kubevirtv1.KubeVirt{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kubevirt", Name: "kubevirt"},
		Spec: kubevirtv1.KubeVirtSpec{Configuration: kubevirtv1.KubeVirtConfiguration{
			VirtualMachineOptions: &kubevirtv1.VirtualMachineOptions{DisableSerialConsoleLog: &kubevirtv1.DisableSerialConsoleLog{}},
			SupportContainerResources: []kubevirtv1.SupportContainerResources{{Type: kubevirtv1.ContainerDisk,
				Resources: kubevirtv1.ResourceRequirementsWithoutClaims{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("300m")}}}},
		}},
	}
	if err := k8s.Create(ctx, kv); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), kv) })
	// Once the manager's cache has the KubeVirt resource, the crawler, reconciled, is
	// decided again. Each poll touches its VMI anew (the same annotation again would
	// change nothing, and reconcile nothing).
	polls := 0
	eventually(t, "the crawler's reservation to count 600m of support containers", func() (bool, string) {
		polls++
		touch(t, vmi, fmt.Sprintf("kubevirt configured, poll %d", polls))
		get(t, c)
		s := c.Status.Sizing
		return quantity(s.SupportCPU) == "600m", quantity(s.SupportCPU) + ", " + quantity(s.SupportMemory)
	})
	if s, p := c.Status.Sizing, c.Status.Placement; quantity(s.SupportMemory) != "80M" || p.Node != "sup-1" {
		t.Errorf("sizing %+v on node %s: want 80M of support memory, on sup-1 still", s, p.Node)
	}
	if get(t, vmi); !vmi.DeletionTimestamp.IsZero() {
		t.Error("counting the support containers again deleted the crawler's VMI")
	}

	// A node with exactly the crawler's exclusive CPUs.
	createNode(t, rtNode("tight-1", "it", "tight"), int64(hostCPUs))
	tight := crawler(ns, "tight", withSelector("it", "tight"))
	if err := k8s.Create(ctx, tight); err != nil {
		t.Fatal(err)
	}
	waitForCrawler(t, tight, "Placed=False", func(c *isov1.CrawlerVM) bool {
		return hasCondition(c, isov1.ConditionPlaced, metav1.ConditionFalse, isov1.ReasonUnschedulable)
	})
	want := fmt.Sprintf("tight-1: needs %d exclusive CPUs and 600m for KubeVirt's support containers, %d free", hostCPUs, hostCPUs)
	if msg := apimeta.FindStatusCondition(tight.Status.Conditions, isov1.ConditionPlaced).Message; !strings.Contains(msg, want) {
		t.Errorf("Placed message %q, want it to say %q", msg, want)
	}
}
