package controllers

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

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
