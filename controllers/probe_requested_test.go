package controllers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

// A probe asked for (kubectl isochron probe annotates the crawler) starts at once on a
// crawler measured already, with trigger Requested, and once: the annotation alone wakes
// the crawler, and a request older than the last probe's start asks for nothing more.
func TestRequestedProbeRunsOnce(t *testing.T) {
	c, vmi := runningCrawler(t, namespace(t), "asked", "")
	_, pod := waitForProbePod(t, c)
	finishPod(t, pod, 0, probeReport(t, 200_000, 2100, 1, 0, 0))
	waitForSLO(t, c, metav1.ConditionTrue, isov1.ReasonSLOMet)

	// A second ahead: the first probe may have started within this very second.
	at := time.Now().Add(time.Second).UTC().Format(time.RFC3339)
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{isov1.AnnotationProbeRequested: at}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := k8s.Patch(context.Background(), c, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	requested := func() []batchv1.Job {
		var out []batchv1.Job
		for _, j := range probeJobs(t, c) {
			if j.Annotations[isov1.AnnotationProbeTrigger] == string(isov1.TriggerRequested) {
				out = append(out, j)
			}
		}
		return out
	}
	eventually(t, "a probe Job with trigger Requested, and its pod", func() (bool, string) {
		got := requested()
		if len(got) != 1 {
			return false, fmt.Sprintf("%d requested Jobs", len(got))
		}
		pods := &corev1.PodList{}
		if err := k8s.List(context.Background(), pods, client.InNamespace(c.Namespace), client.MatchingLabels{batchv1.JobNameLabel: got[0].Name}); err != nil {
			return false, err.Error()
		}
		if len(pods.Items) != 1 {
			return false, fmt.Sprintf("Job %s has %d pods", got[0].Name, len(pods.Items))
		}
		pod = &pods.Items[0]
		return true, ""
	})
	finishPod(t, pod, 0, probeReport(t, 200_000, 2100, 1, 0, 0))
	eventually(t, "the requested probe recorded", func() (bool, string) {
		get(t, c)
		lp := c.Status.LastProbe
		return lp != nil && lp.Trigger == isov1.TriggerRequested && lp.CompletionTime != nil, fmt.Sprintf("lastProbe %+v", lp)
	})
	for i := range 3 {
		touch(t, vmi, fmt.Sprintf("after the request %d", i))
	}
	get(t, c)
	if got := requested(); len(got) != 1 {
		t.Errorf("%d probe Jobs with trigger Requested, want 1", len(got))
	}
}
