package slo

import (
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

// Sort splits a crawler's probe Jobs, keeping only those the crawler (owner) controls:
// the ones that have not finished, oldest first, and the newest finished one that last
// (status.lastProbe) does not record yet, or nil.
func Sort(jobs []batchv1.Job, owner metav1.Object, last *isov1.ProbeResult) (active []*batchv1.Job, unrecorded *batchv1.Job) {
	for i := range jobs {
		j := &jobs[i]
		if !metav1.IsControlledBy(j, owner) {
			continue
		}
		if done, _, _, _ := Finished(j); !done {
			active = append(active, j)
			continue
		}
		if last != nil && (j.Name == last.Job || j.CreationTimestamp.Before(&last.StartTime)) {
			continue
		}
		if unrecorded == nil || unrecorded.CreationTimestamp.Before(&j.CreationTimestamp) {
			unrecorded = j
		}
	}
	for i := 1; i < len(active); i++ { // insertion sort: there is at most one or two
		for k := i; k > 0 && active[k].CreationTimestamp.Before(&active[k-1].CreationTimestamp); k-- {
			active[k], active[k-1] = active[k-1], active[k]
		}
	}
	return active, unrecorded
}
