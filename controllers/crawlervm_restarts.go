package controllers

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/readiness"
	"isochron.io/isochron/internal/render"
)

// restartForInputs says whether isochron restarts the VMI: it was started from other
// inputs than the VM's template (AnnotationVMInputs), and either KubeVirt reports that
// the template has changed in a way it cannot apply to the running VMI (RestartRequired)
// or the user's cloud-init data changed (AnnotationUserDataHash: it is in the guest
// Secret, which KubeVirt reads only at a start, so the template does not show it). A
// template that differs only in how a newer release renders the same inputs restarts
// nothing; the VMI takes it at its next start.
func restartForInputs(vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance) bool {
	if !vmi.DeletionTimestamp.IsZero() || vm.Spec.Template == nil {
		return false
	}
	t := vm.Spec.Template.ObjectMeta.Annotations
	if vmi.Annotations[isov1.AnnotationVMInputs] == t[isov1.AnnotationVMInputs] {
		return false
	}
	return restartRequired(vm) || vmi.Annotations[isov1.AnnotationUserDataHash] != t[isov1.AnnotationUserDataHash]
}

// restartTurnEvery is how often a crawler that waits for its turn to restart looks again.
const restartTurnEvery = 10 * time.Second

// restartVMI restarts vmi, started from inputs KubeVirt cannot apply to it live, when it
// is the crawler's turn (restartTurn): KubeVirt starts the new one (runStrategy Always)
// once it is gone. Otherwise it returns whose restart the crawler waits for.
func (r *CrawlerVMReconciler) restartVMI(ctx context.Context, s *scope, vmi *kubevirtv1.VirtualMachineInstance) (restarted bool, waitFor string, err error) {
	cvm := s.cvm
	if waitFor, err = r.restartTurn(ctx, cvm, vmi); waitFor != "" || err != nil {
		return false, waitFor, err
	}
	if err := r.Delete(ctx, vmi, client.Preconditions{UID: &vmi.UID}); client.IgnoreNotFound(err) != nil {
		return false, "", fmt.Errorf("restarting VMI %s: %w", vmi.Name, err)
	}
	why := fmt.Sprintf("spec generation %d changed what the VM is made from (spec, size or RT binding), which KubeVirt cannot apply to a running VMI", cvm.Generation)
	r.Recorder.Eventf(cvm, corev1.EventTypeNormal, isov1.ReasonVMIReplacing, "Restarting VMI %s: %s", vmi.Name, why)
	r.setReady(s, readiness.Progress(isov1.ReasonVMIReplacing, fmt.Sprintf("%s; VMI %s restarts", why, vmi.Name)))
	return true, "", nil
}

// restartTurn is whose restart the crawler waits for before it restarts its VMI vmi for a
// changed input: one crawler of an RT network at a time (restartTurns), the others' turn
// judged from their status, VMs and VMIs in the cache (readiness.RestartTurn). "" when it
// is the crawler's turn, which it then holds, or it has no RT-NIC.
func (r *CrawlerVMReconciler) restartTurn(ctx context.Context, cvm *isov1.CrawlerVM, vmi *kubevirtv1.VirtualMachineInstance) (string, error) {
	if cvm.Spec.RTNIC == nil {
		return "", nil
	}
	network := render.NetworkKey(cvm).String()
	return r.restarts.take(ctx, r.Client, network, client.ObjectKeyFromObject(cvm), vmi.UID, r.clock.Now(), func() (string, error) {
		list := &isov1.CrawlerVMList{}
		if err := r.List(ctx, list, client.MatchingFields{indexRTNetwork: network}); err != nil {
			return "", fmt.Errorf("listing the crawlers of network %s: %w", network, err)
		}
		var neighbours []readiness.Neighbour
		for i := range list.Items {
			c := &list.Items[i]
			key := client.ObjectKey{Namespace: c.Namespace, Name: render.Name(c)}
			n := readiness.Neighbour{Key: c.Namespace + "/" + c.Name}
			if ready := apimeta.FindStatusCondition(c.Status.Conditions, isov1.ConditionReady); ready != nil {
				n.Restarting = ready.Reason == isov1.ReasonVMIReplacing || ready.Reason == isov1.ReasonVMIPending
			}
			vm, err := getOrNil(ctx, r.Client, key, &kubevirtv1.VirtualMachine{})
			if err != nil {
				return "", err
			}
			other, err := getOrNil(ctx, r.Client, key, &kubevirtv1.VirtualMachineInstance{})
			if err != nil {
				return "", err
			}
			n.NeedsRestart = vm != nil && other != nil && restartForInputs(vm, other)
			neighbours = append(neighbours, n)
		}
		return readiness.RestartTurn(cvm.Namespace+"/"+cvm.Name, neighbours), nil
	})
}

// restartRequired says whether KubeVirt reports that the VM needs a restart to apply its
// template (RestartRequired).
func restartRequired(vm *kubevirtv1.VirtualMachine) bool {
	if vm == nil {
		return false
	}
	for _, c := range vm.Status.Conditions {
		if c.Type == kubevirtv1.VirtualMachineRestartRequired && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// restartTurns serialises the restarts of the crawlers of one RT network for a changed
// input (readiness.RestartTurn): a crawler that restarts takes its network's turn, and
// keeps it until a new VMI of it runs, so that two reconciles deciding at once never
// restart two crawlers of a network together. It lives in the leader's memory; after a
// hand-over the crawlers' status (Ready's reason) tells the new leader who restarts.
type restartTurns struct {
	mu      sync.Mutex
	holders map[string]restartTurn // by network (namespace/name)
}

// restartTurn is who holds a network's turn: the crawler, the VMI it restarts, since when.
type restartTurn struct {
	crawler client.ObjectKey
	vmi     types.UID
	since   time.Time
}

// maxRestartTurn bounds a turn: a crawler whose new VMI does not run within it (an image
// that cannot be pulled) does not keep its network's crawlers from restarting for ever.
const maxRestartTurn = 10 * time.Minute

// take gives the crawler network's turn to restart its VMI vmi, unless another crawler
// holds it and has not run again since: then it returns that crawler's key. decide is
// the rest of the judgement (the neighbours' status), asked only while no one holds it.
func (t *restartTurns) take(ctx context.Context, c client.Reader, network string, crawler client.ObjectKey, vmi types.UID, now time.Time, decide func() (string, error)) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if h, ok := t.holders[network]; ok && h.crawler != crawler {
		back, err := t.ranAgain(ctx, c, h, now)
		if err != nil {
			return "", err
		}
		if !back {
			return h.crawler.String(), nil
		}
		delete(t.holders, network)
	}
	wait, err := decide()
	if err != nil || wait != "" {
		return wait, err
	}
	if t.holders == nil {
		t.holders = map[string]restartTurn{}
	}
	t.holders[network] = restartTurn{crawler: crawler, vmi: vmi, since: now}
	return "", nil
}

// ranAgain says whether h's crawler runs a new VMI, is gone, or held its turn too long.
func (t *restartTurns) ranAgain(ctx context.Context, c client.Reader, h restartTurn, now time.Time) (bool, error) {
	if now.Sub(h.since) > maxRestartTurn {
		return true, nil
	}
	if err := c.Get(ctx, h.crawler, &isov1.CrawlerVM{}); err != nil {
		return client.IgnoreNotFound(err) == nil, client.IgnoreNotFound(err)
	}
	vmi, err := getOrNil(ctx, c, h.crawler, &kubevirtv1.VirtualMachineInstance{})
	if err != nil {
		return false, err
	}
	return vmi != nil && vmi.UID != h.vmi && vmi.Status.Phase == kubevirtv1.Running, nil
}
