package controllers

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

// DefaultAPIPollInterval is how often the operator asks the API server's discovery
// whether an optional API it waits for (Multus' NetworkAttachmentDefinition) is served.
const DefaultAPIPollInterval = 10 * time.Second

// optionalAPI waits for an API that isochron can run without and, once the API server
// serves it, starts what needs it, as Kueue's waitForAPI does for its optional job
// integrations. It asks discovery (through the manager's REST mapper, which reloads a
// group it does not know) rather than watching CustomResourceDefinitions: no permission
// on CRDs, and none of their large objects in memory.
type optionalAPI struct {
	gvk    schema.GroupVersionKind
	mapper apimeta.RESTMapper
	every  time.Duration
	// served starts what needs the API, once, when the API is first served; waited says
	// whether it was missing when the operator started.
	served func(ctx context.Context, waited bool) error
	log    logr.Logger
}

// Start polls until the API is served, runs served, and returns.
func (o *optionalAPI) Start(ctx context.Context) error {
	t := time.NewTicker(o.every)
	defer t.Stop()
	waited := false
	for {
		_, err := o.mapper.RESTMapping(o.gvk.GroupKind(), o.gvk.Version)
		switch {
		case err == nil:
			if waited {
				o.log.Info("API now served: watching it", "gvk", o.gvk)
			}
			return o.served(ctx, waited)
		case !apimeta.IsNoMatchError(err):
			o.log.Error(err, "Reading the API server's discovery", "gvk", o.gvk)
		case !waited:
			o.log.Info("API not served: waiting for it; crawlers that need it say so in their status", "gvk", o.gvk, "every", o.every.String())
			waited = true
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// NeedLeaderElection is false: every replica's cache must know the API, as any
// replica's controller may come to lead.
func (o *optionalAPI) NeedLeaderElection() bool { return false }

// withRTNIC are the crawlers with an RT-NIC, whatever their network: those waiting for
// an API the RT-NIC needs.
func withRTNIC(_, _ client.Object) []crawlers {
	return []crawlers{{keep: func(c *isov1.CrawlerVM) bool { return c.Spec.RTNIC != nil }}}
}

// wake sends one event on ch without blocking: a wake already pending does the same.
func wake(ch chan event.GenericEvent, obj client.Object) {
	select {
	case ch <- event.GenericEvent{Object: obj}:
	default:
	}
}
