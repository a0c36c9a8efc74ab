package slo

import (
	"fmt"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

// What a probe trusts (docs/probes.md). Labels and owner references are anyone's to
// write: a tenant can create a Job with a probe's labels and an owner reference to its
// crawler, and a pod with a probe Job's labels, or even one that names the Job as its
// controller. isochron believes only the Job whose UID it recorded when it created it
// (status.activeProbe), and of that Job only a pod that the Job controls and that runs
// the Job's own template, the program isochron wrote into it.

// Recorded is the crawler's probe Job that active (status.activeProbe) records, found
// among jobs by its UID; nil when none of them is that Job.
func Recorded(jobs []batchv1.Job, active *isov1.ActiveProbe) *batchv1.Job {
	if active == nil {
		return nil
	}
	for i := range jobs {
		if string(jobs[i].UID) == active.UID {
			return &jobs[i]
		}
	}
	return nil
}

// Ours says whether isochron created job for cvm: the crawler controls it, and it is
// named as JobName names the run its annotations record, which no one without key (the
// manager's) can do. A Job that passes is isochron's, or a copy of one of its Jobs
// under the name of a run isochron recorded long ago; either may be deleted, neither is
// believed (only Recorded is).
func Ours(job *batchv1.Job, cvm *isov1.CrawlerVM, key []byte) bool {
	if !metav1.IsControlledBy(job, cvm) {
		return false
	}
	run, err := RunOf(job)
	return err == nil && job.Name == JobName(key, cvm, run)
}

// KeepFinished is how many finished probe Jobs isochron keeps per crawler, besides the
// one it has not recorded yet: the last verdict's Job and the two before it, so that a
// person can read a failing probe's log next to the runs before it. Older ones are
// deleted (with their pods) at once, whatever the TTL (--probe-ttl): a crawler whose
// probes are cancelled or fail again and again does not pile Jobs up until the TTL.
const KeepFinished = 3

// Prune is the finished probe Jobs isochron made for cvm (Ours) beyond the KeepFinished
// newest, oldest first; never the Job active records, nor one being deleted.
func Prune(jobs []batchv1.Job, cvm *isov1.CrawlerVM, key []byte, active *isov1.ActiveProbe) []*batchv1.Job {
	var finished []*batchv1.Job
	for i := range jobs {
		j := &jobs[i]
		if done, _, _, _ := Finished(j); !done || !j.DeletionTimestamp.IsZero() || (active != nil && string(j.UID) == active.UID) || !Ours(j, cvm, key) {
			continue
		}
		finished = append(finished, j)
	}
	if len(finished) <= KeepFinished {
		return nil
	}
	slices.SortFunc(finished, func(a, b *batchv1.Job) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return finished[:len(finished)-KeepFinished]
}

// ProbePods are the pods of job whose termination message is believed: controlled by
// job (by its UID, not its name) and running job's own template, as its Job controller
// makes them. ignored says why each other pod of pods was not, for the result's message.
func ProbePods(pods []corev1.Pod, job *batchv1.Job) (trusted []corev1.Pod, ignored []string) {
	for i := range pods {
		p := &pods[i]
		switch {
		case !metav1.IsControlledBy(p, job):
			ignored = append(ignored, fmt.Sprintf("pod %s is not controlled by probe Job %s (uid %s)", p.Name, job.Name, job.UID))
		case !runsTemplate(&p.Spec, &job.Spec.Template.Spec):
			ignored = append(ignored, fmt.Sprintf("pod %s does not run the probe Job's template", p.Name))
		default:
			trusted = append(trusted, *p)
		}
	}
	return trusted, ignored
}

// runsTemplate says whether a pod spec runs what the template says, and nothing beside
// it that could reach its containers: the same containers (image, command, arguments,
// environment, mounts, termination message path), no others, no ephemeral ones, the
// same volumes and no shared process namespace.
func runsTemplate(pod, tmpl *corev1.PodSpec) bool {
	same := func(a, b []corev1.Container) bool {
		if len(a) != len(b) {
			return false
		}
		for i := range a {
			x, y := &a[i], &b[i]
			if x.Name != y.Name || x.Image != y.Image || x.TerminationMessagePath != y.TerminationMessagePath ||
				!equality.Semantic.DeepEqual(x.Command, y.Command) || !equality.Semantic.DeepEqual(x.Args, y.Args) ||
				!equality.Semantic.DeepEqual(x.Env, y.Env) || !equality.Semantic.DeepEqual(x.EnvFrom, y.EnvFrom) ||
				!equality.Semantic.DeepEqual(x.VolumeMounts, y.VolumeMounts) {
				return false
			}
		}
		return true
	}
	return same(pod.Containers, tmpl.Containers) && same(pod.InitContainers, tmpl.InitContainers) && len(pod.EphemeralContainers) == 0 &&
		equality.Semantic.DeepEqual(pod.Volumes, tmpl.Volumes) && equality.Semantic.DeepEqual(pod.ShareProcessNamespace, tmpl.ShareProcessNamespace) &&
		pod.HostPID == tmpl.HostPID && pod.HostIPC == tmpl.HostIPC
}

// CancelWait is how long a cancelled probe holds back the crawler's next one while its Job
// is being deleted. Its pod has 10 s to stop (terminationGracePeriodSeconds) and the
// foreground deletion ends a moment after the kubelet reports it gone; a pod whose node
// does not answer (an unreachable or dead node) is never reported gone, and the deletion
// would hold every later probe of the crawler for as long. After CancelWait the next
// probe starts: the old pod, terminating, is no endpoint of the probe Service (which
// selects the new Job's pods only) and its result is never read; its Job goes when its
// pod does (the node's kubelet back, or the pod garbage collector once the node is
// deleted or marked out of service).
const CancelWait = 2 * time.Minute

// CancelWaitOver says whether the cancelled probe a records no longer holds back the
// next one at now; when it still does, wait is how long until it does not.
func CancelWaitOver(a *isov1.ActiveProbe, now time.Time) (over bool, wait time.Duration) {
	if a == nil || a.CancelTime == nil {
		return false, 0
	}
	end := a.CancelTime.Add(CancelWait)
	if !now.Before(end) {
		return true, 0
	}
	return false, end.Sub(now)
}
