package controllers_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

// taint puts taint on node name, as its owner does to keep others off.
func taint(t *testing.T, name string, taint corev1.Taint) {
	t.Helper()
	n := &corev1.Node{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Name: name}, n); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(n.DeepCopy())
	n.Spec.Taints = append(n.Spec.Taints, taint)
	if err := k8s.Patch(context.Background(), n, patch); err != nil {
		t.Fatal(err)
	}
}

// A tenant tolerates every taint to reach a node another owner tainted for itself: the
// manager does not place it there (the suite's rules allow only testTaint), and says
// which field and what to do. A crawler tolerating the taint its namespace may tolerate
// reaches its node.
func TestNodeAccessIsTheAdministrators(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	createNode(t, rtNode("acc-theirs", "it", "acc-theirs"), 16)
	taint(t, "acc-theirs", corev1.Taint{Key: "other-owner/dedicated", Value: "yes", Effect: corev1.TaintEffectNoSchedule})
	createNode(t, rtNode("acc-shared", "it", "acc-shared"), 16)
	taint(t, "acc-shared", corev1.Taint{Key: testTaint, Effect: corev1.TaintEffectNoSchedule})

	greedy := crawler(ns, "greedy", withSelector("it", "acc-theirs"))
	greedy.Spec.Placement.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	allowed := crawler(ns, "allowed", withSelector("it", "acc-shared"))
	allowed.Spec.Placement.Tolerations = []corev1.Toleration{{Key: testTaint, Operator: corev1.TolerationOpExists}}
	for _, c := range []*isov1.CrawlerVM{greedy, allowed} {
		if err := k8s.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	waitForCrawler(t, greedy, "Placed=False NodeAccessNotAllowed", func(c *isov1.CrawlerVM) bool {
		return hasCondition(c, isov1.ConditionPlaced, metav1.ConditionFalse, isov1.ReasonNodeAccessNotAllowed)
	})
	if greedy.Status.Placement != nil {
		t.Errorf("the greedy crawler holds node %s", greedy.Status.Placement.Node)
	}
	msg := apimeta.FindStatusCondition(greedy.Status.Conditions, isov1.ConditionPlaced).Message
	if !strings.Contains(msg, "spec.placement.tolerations[0] tolerates every taint") || !strings.Contains(msg, isov1.NodeAccessConfigMap) {
		t.Errorf("Placed message %q: want the field and the ConfigMap that decides", msg)
	}
	waitForCrawler(t, allowed, "placed on acc-shared", func(c *isov1.CrawlerVM) bool {
		return c.Status.Placement != nil && c.Status.Placement.Node == "acc-shared"
	})
	if got := awaitEvents(t, greedy, isov1.ReasonNodeAccessNotAllowed+": "); len(got) != 1 {
		t.Errorf("NodeAccessNotAllowed Events %v, want one", got)
	}
}
